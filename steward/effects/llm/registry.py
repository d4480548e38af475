"""The provider registry: a name in ``[models.<name>] provider`` to a factory.

A factory takes the model's ``ModelConfig`` and returns a ``Provider``.
Factories import their SDK inside the call, so an SDK is loaded only when a
model uses it. To add a provider, write its adapter module (normalizing the
SDK's stream into ``steward.effects.llm.base`` events and its failures into typed
``ProviderError``s; an HTTP API's adapter subclasses ``_wire.HttpProvider`` and
writes only what is its API's own) and add one entry to ``PROVIDERS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec

from steward.actors.prompt import Prompt
from steward.config import ModelConfig, Settings
from steward.effects.llm.base import Provider, RequestInfo, StreamEvent
from steward.effects.llm.limits import RateLimiter
from steward.effects.llm.retry import cost_usd
from steward.errors import ProviderError
from steward.events.protocol import Usage

__all__ = [
    "PROVIDERS",
    "ModelRouter",
    "ProviderFactory",
    "UnknownProviderError",
    "make_provider",
]

ProviderFactory = Callable[[ModelConfig], Provider]
"""Builds a provider from its model's settings."""


def _scripted(config: ModelConfig) -> Provider:
    from steward.effects.llm.scripted import ScriptedProvider

    if config.script is None:
        return ScriptedProvider(
            (),
            label="<no script>",
            hint="set `script` in the [models.<name>] table or pass --script",
        )
    return ScriptedProvider.from_file(config.script)


def _anthropic(config: ModelConfig) -> Provider:
    from steward.effects.llm.anthropic import AnthropicProvider

    return AnthropicProvider.from_config(config)


def _openai(config: ModelConfig) -> Provider:
    from steward.effects.llm.openai import OpenAIProvider

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


class ModelRouter:
    """The provider for each request: the ``[models.<name>]`` table of the
    model it asks for.

    A `Provider` itself: ``stream`` asks the provider of the request's table
    (`table`), built on first use and kept: the one the request names
    (``info.table``: a session's model, switched with ``/model``; a
    workflow node's ``provider``), else its agent profile's.
    ``cost`` prices a call at its table's prices. With ``script`` set, every
    table plays that script instead (the ``--script`` option).
    """

    name = "router"

    def __init__(self, settings: Settings, script: str | None = None) -> None:
        self.settings = settings
        self.script = script
        self._built: dict[str, Provider] = {}
        self._rates: dict[str, RateLimiter] = {}

    def table(self, profile: str | None, table: str | None = None) -> str:
        """The name of the table a request of ``profile`` naming ``table``
        goes to: that one if it is configured, else the profile's."""
        if table is not None and table in self.settings.models:
            return table
        return self.settings.profile(profile or "default").model

    def model(self, profile: str | None, table: str | None = None) -> ModelConfig:
        """The table a request of ``profile`` naming ``table`` goes to."""
        name = self.table(profile, table)
        config = (
            self.settings.models[name]
            if name in self.settings.models
            else self.settings.model_for(profile or "default")  # names the error
        )
        if self.script is not None:
            config = msgspec.structs.replace(
                config, provider="scripted", script=self.script
            )
        return config

    def provider(self, profile: str | None, table: str | None = None) -> Provider:
        """The provider of `table`, built once (errors name the setting)."""
        name = self.table(profile, table)
        built = self._built.get(name)
        if built is None:
            config = self.model(profile, table)
            built = self._built[name] = make_provider(config.provider, config)
        return built

    def rate_limiter(
        self,
        info: RequestInfo,
        now: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> RateLimiter:
        """The rate limiter of ``info``'s table (one per table, shared)."""
        name = self.table(info.profile, info.table)
        limiter = self._rates.get(name)
        if limiter is None:
            config = self.model(info.profile, info.table)
            limiter = self._rates[name] = RateLimiter(
                config.requests_per_minute, config.tokens_per_minute, now, sleep
            )
        return limiter

    def stream(self, prompt: Prompt, info: RequestInfo) -> AsyncIterator[StreamEvent]:
        return self.provider(info.profile, info.table).stream(prompt, info)

    def cost(self, info: RequestInfo, usage: Usage) -> float:
        """What ``info``'s call with ``usage`` cost at its table's prices, in
        US dollars."""
        return cost_usd(usage, self.model(info.profile, info.table))

    async def aclose(self) -> None:
        """Close every provider built (their HTTP connection pools)."""
        for provider in self._built.values():
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
        self._built.clear()
