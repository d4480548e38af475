"""Model settings for real providers, and the registry that builds them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import KEY
from fake_api import FakeAPI, anthropic_frames, sse_reply

from steward.actors.prompt import Prompt
from steward.actors.run.events import ChatMessage
from steward.config import ModelConfig, Settings, load_settings
from steward.effects.llm import PROVIDERS, RequestInfo, collect, make_provider
from steward.effects.llm.anthropic import AnthropicProvider
from steward.effects.llm.openai import OpenAIProvider
from steward.errors import ConfigError, ProviderError

INFO = RequestInfo(stream="run.run-1", request_id="req-1")
PROMPT = Prompt(model="", system="", messages=(ChatMessage(role="user", content="hi"),))

TOML = """
[models.claude]
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "TEAM_ANTHROPIC_KEY"
context_budget = 200000
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0
max_tokens = 2048
timeout = 90

[models.local]
provider = "openai"
model = "llama3.1"
base_url = "http://localhost:11434/v1"
stream = false
"""


def test_model_tables_carry_keys_budgets_and_prices(tmp_path: Path) -> None:
    """[models.<name>] reads the key variable, context budget, prices and caps."""
    path = tmp_path / "steward.toml"
    path.write_text(TOML)
    settings = load_settings(path, env={})
    claude = settings.models["claude"]
    assert (claude.provider, claude.model) == ("anthropic", "claude-sonnet-4-5")
    assert claude.api_key_env == "TEAM_ANTHROPIC_KEY"
    assert claude.context_budget == 200_000
    assert (claude.input_price_per_mtok, claude.output_price_per_mtok) == (3.0, 15.0)
    assert (claude.max_tokens, claude.timeout, claude.stream) == (2048, 90.0, True)
    local = settings.models["local"]
    assert local.base_url == "http://localhost:11434/v1"
    assert (local.stream, local.api_key, local.api_key_env) == (False, None, None)


def test_new_fields_default_to_unset_and_free() -> None:
    """Without settings a model has no key, no budget and costs nothing."""
    model = ModelConfig()
    assert (model.api_key, model.api_key_env, model.context_budget) == (
        None,
        None,
        None,
    )
    assert (model.input_price_per_mtok, model.output_price_per_mtok) == (0.0, 0.0)
    assert model.stream is True


def test_environment_overrides_reach_the_new_fields(tmp_path: Path) -> None:
    """STEWARD_MODELS_<NAME>_<KEY> sets the new fields like any other."""
    path = tmp_path / "steward.toml"
    path.write_text(TOML)
    env = {
        "STEWARD_MODELS_CLAUDE_API_KEY_ENV": "OTHER_KEY",
        "STEWARD_MODELS_CLAUDE_OUTPUT_PRICE_PER_MTOK": "75",
    }
    claude = load_settings(path, env=env).models["claude"]
    assert (claude.api_key_env, claude.output_price_per_mtok) == ("OTHER_KEY", 75.0)


def test_a_negative_price_names_the_key(tmp_path: Path) -> None:
    """A price below zero is a ConfigError naming the file and the key."""
    path = tmp_path / "steward.toml"
    path.write_text('[models.x]\nprovider = "openai"\ninput_price_per_mtok = -1\n')
    with pytest.raises(ConfigError, match=r"models\.x\.input_price_per_mtok: "):
        load_settings(path, env={})


def test_repr_hides_the_api_key() -> None:
    """A model's key never shows in its repr, nor in the settings' repr."""
    model = ModelConfig(provider="openai", model="gpt-test", api_key=KEY)
    settings = Settings(models={"default": model})
    assert KEY not in repr(model)
    assert KEY not in repr(settings)
    assert KEY not in str(model)
    assert "api_key='***'" in repr(model)
    assert "api_key=None" in repr(ModelConfig())


def test_both_real_providers_are_registered() -> None:
    """anthropic and openai are registry names next to scripted."""
    assert sorted(PROVIDERS) == ["anthropic", "openai", "scripted"]


async def test_make_provider_builds_anthropic_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ANTHROPIC_API_KEY set, an anthropic model needs no other setting."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    provider = make_provider(
        "anthropic", ModelConfig(provider="anthropic", model="claude-test")
    )
    assert isinstance(provider, AnthropicProvider)
    try:
        assert provider.name == "anthropic"
        assert KEY not in repr(provider)
    finally:
        await provider.aclose()


async def test_make_provider_builds_openai_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With OPENAI_API_KEY set, an openai model needs no other setting."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    provider = make_provider("openai", ModelConfig(provider="openai", model="gpt-x"))
    assert isinstance(provider, OpenAIProvider)
    try:
        assert provider.name == "openai"
    finally:
        await provider.aclose()


async def test_an_api_key_setting_wins_over_the_environment(
    api: FakeAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """api_key in the table is used before any variable; no key is an error."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProviderError, match="set ANTHROPIC_API_KEY"):
        make_provider("anthropic", ModelConfig(provider="anthropic", model="m"))
    config = ModelConfig(provider="anthropic", model="m", api_key=KEY, base_url=api.url)
    provider = AnthropicProvider.from_config(config, env={"ANTHROPIC_API_KEY": "env"})
    try:
        api.queue(sse_reply(anthropic_frames(["ok"])))
        await collect(provider.stream(PROMPT, INFO))
    finally:
        await provider.aclose()
    headers = api.requests[0].headers
    assert KEY in headers.get("x-api-key", "") + headers.get("authorization", "")
