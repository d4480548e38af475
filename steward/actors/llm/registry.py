"""The provider registry: a name in ``[models.<name>] provider`` to a factory.

A factory takes the model's ``ModelConfig`` and returns a ``Provider``.
Factories import their SDK inside the call, so an SDK is loaded only when a
model uses it. To add a provider, write its adapter module (normalizing the
SDK's stream into ``steward.actors.llm.base`` events and its failures into typed
``ProviderError``s; an HTTP API's adapter subclasses ``_wire.HttpProvider`` and
writes only what is its API's own) and add one entry to ``PROVIDERS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec

from steward.actors.llm.base import Provider, RequestInfo, StreamEvent
from steward.actors.llm.limits import RateLimiter
from steward.actors.llm.retry import cost_usd
from steward.actors.prompt import Prompt
from steward.config import ModelConfig, Settings
from steward.errors import ProviderError
from steward.events.run import Usage

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


class ModelRouter:
    """The provider for each request: the model of the run's agent profile.

    A `Provider` itself: ``stream`` asks the provider of
    ``settings.model_for(info.profile)``, built on first use and kept. ``cost``
    prices a call at that model's configured prices. With ``script`` set, every
    profile plays that script instead (the ``--script`` option).
    """

    name = "router"

    def __init__(self, settings: Settings, script: str | None = None) -> None:
        self.settings = settings
        self.script = script
        self._built: dict[str, Provider] = {}
        self._rates: dict[str, RateLimiter] = {}

    def model(self, profile: str | None) -> ModelConfig:
        """The ``[models.<name>]`` table requests of ``profile`` go to."""
        model = self.settings.model_for(profile or "default")
        if self.script is not None:
            model = msgspec.structs.replace(
                model, provider="scripted", script=self.script
            )
        return model

    def provider(self, profile: str | None) -> Provider:
        """The provider for ``profile``, built once (errors name the setting)."""
        key = profile or "default"
        built = self._built.get(key)
        if built is None:
            model = self.model(key)
            built = self._built[key] = make_provider(model.provider, model)
        return built

    def rate_limiter(
        self,
        profile: str | None,
        now: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> RateLimiter:
        """The rate limiter of ``profile``'s model (one per model, shared)."""
        name = self.settings.profile(profile or "default").model
        limiter = self._rates.get(name)
        if limiter is None:
            model = self.model(profile)
            limiter = self._rates[name] = RateLimiter(
                model.requests_per_minute, model.tokens_per_minute, now, sleep
            )
        return limiter

    def stream(self, prompt: Prompt, info: RequestInfo) -> AsyncIterator[StreamEvent]:
        return self.provider(info.profile).stream(prompt, info)

    def cost(self, info: RequestInfo, usage: Usage) -> float:
        """What a call of ``info``'s profile with ``usage`` cost, in US dollars."""
        return cost_usd(usage, self.model(info.profile))

    async def aclose(self) -> None:
        """Close every provider built (their HTTP connection pools)."""
        for provider in self._built.values():
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
        self._built.clear()
