"""The provider registry: a name in ``[models.<name>] provider`` to a factory.

A factory takes the model's ``ModelConfig`` and returns a ``Provider``.
Factories import their SDK inside the call, so an SDK is loaded only when a
model uses it. To add a provider, write its adapter module (normalizing the
SDK's stream into ``steward.actors.llm.base`` events and its failures into typed
``ProviderError``s) and add one entry to ``PROVIDERS``.
"""

from __future__ import annotations

from collections.abc import Callable

from steward.actors.llm.base import Provider
from steward.config import ModelConfig
from steward.errors import ProviderError

__all__ = ["PROVIDERS", "ProviderFactory", "UnknownProviderError", "make_provider"]

ProviderFactory = Callable[[ModelConfig], Provider]
"""Builds a provider from its model's settings."""


def _scripted(config: ModelConfig) -> Provider:
    from steward.actors.llm.scripted import ScriptedProvider

    if config.script is None:
        return ScriptedProvider(
            (),
            label="<no script>",
            hint="set `script` in the [models.<name>] table or pass --script",
        )
    return ScriptedProvider.from_file(config.script)


def _anthropic(config: ModelConfig) -> Provider:
    from steward.actors.llm.anthropic import AnthropicProvider

    return AnthropicProvider.from_config(config)


def _openai(config: ModelConfig) -> Provider:
    from steward.actors.llm.openai import OpenAIProvider

    return OpenAIProvider.from_config(config)


PROVIDERS: dict[str, ProviderFactory] = {
    "anthropic": _anthropic,
    "openai": _openai,
    "scripted": _scripted,
}
"""Every provider steward can build, by name."""


class UnknownProviderError(ProviderError):
    """A model names a provider that is not registered (``code`` is stable)."""

    code = "unknown_provider"

    def __init__(self, provider: str, available: list[str]) -> None:
        self.provider = provider
        self.available = available
        super().__init__(
            "config",
            f"unknown provider {provider!r}; available providers: "
            f"{', '.join(available)}",
        )


def make_provider(name: str, config: ModelConfig | None = None) -> Provider:
    """The provider registered as ``name``, built from ``config``.

    Raises:
        UnknownProviderError: ``name`` is not registered (a ``ProviderError`` of
            kind ``config`` listing the available names, sorted).
        ProviderError: ``config`` when an ``anthropic`` or ``openai`` model has
            no model id or no API key.
        ScriptError: a scripted model's script is missing or invalid.
    """
    factory = PROVIDERS.get(name)
    if factory is None:
        raise UnknownProviderError(name, sorted(PROVIDERS))
    return factory(config if config is not None else ModelConfig(provider=name))
