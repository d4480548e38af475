"""steward's contract suites, for an extension's kind or log backend to
run on its own, as steward's tests run them on its four kinds and two logs.

`steward.testing.kinds` holds the kind contract: plain checks of a kind on
golden logs of it (streams a real host recorded, exported one JSON line an
event), needing no test framework. An extension checks its kind ``MINE``
in a test of its own, granting the exceptions its streams need by name
(``open_at_end=...``, see `steward.testing.kinds.Terms`)::

    from pathlib import Path

    from steward.kinds import KINDS
    from steward.testing.kinds import check_kind, read_samples

    def test_my_kind_keeps_the_contract() -> None:
        kinds = KINDS.replaced(MINE)
        samples = read_samples(Path(__file__).parent / "golden", kinds.union)
        check_kind(MINE, samples, kinds)

`steward.testing.logs` holds the EventLog contract, a pytest suite (with
pytest-asyncio, of the ``test`` extra): a backend subclasses its
`LogContract` in a test module and provides the fixtures ``log`` and
``make_log``. steward itself imports neither.
"""
