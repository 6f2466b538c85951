"""What a turn cost: the tool's own figure, else its tokens at the price table's rates, else unknown.

The price table ships with agentbox (`agentbox/data/prices.json`: per vendor and model, US
dollars per million input, cached input, cache-write, output and reasoning tokens, with the
date the figures were taken) and is a snapshot, so the person may correct or extend it under
`prices:` in their own config.yaml (never in crew.yaml, which comes with a repository). A turn
whose tool reports no cost and whose model is not in the table costs "unknown" (None), never 0.
Only the standard library is imported here: every turn prices itself.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the faces format costs with this module without loading the adapters
    from agentbox.core.runtimes.base import Usage

PRICES_FILE = "prices.json"
RELEASE_SUFFIX = re.compile(r"[-@:](\d{8}|\d{4}-\d{2}-\d{2}|latest)([-:]v\d+(:\d+)?)?")
"""What may follow a table entry's id in a model id and still be that model: a release date or tag
(`-20250929`, `@20250929`, `-2025-08-07`, `-latest`, `-20250929-v1:0`); a newer model of the
family (`claude-opus-4-6` after `claude-opus-4`) is not the older one's price."""
TOOL_VENDORS: dict[str, tuple[str, ...]] = {
    "claude": ("anthropic",),
    "codex": ("openai",),
    "scripted": ("scripted",),
}
"""The vendors whose models a tool runs; a tool not named here (opencode, hermes) may run any vendor's."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens of one model."""

    input: float
    output: float
    cached_input: float | None = None
    """None: priced as `input`."""
    cache_write: float | None = None
    """None: priced as `input`."""
    reasoning: float | None = None
    """None: priced as `output`."""

    def cost(self, usage: Usage) -> float | None:
        """What `usage` costs at these rates (None when the turn's usage is unknown)."""
        if not usage.known:
            return None
        per_token = (
            (usage.input_tokens or 0) * self.input
            + (usage.cached_input_tokens or 0) * (self.input if self.cached_input is None else self.cached_input)
            + (usage.cache_write_tokens or 0) * (self.input if self.cache_write is None else self.cache_write)
            + (usage.output_tokens or 0) * self.output
            + (usage.reasoning_tokens or 0) * (self.output if self.reasoning is None else self.reasoning)
        )
        return per_token / 1_000_000


@dataclass(frozen=True)
class PriceTable:
    """Prices per vendor and model, the date they were taken, and aliases of model names."""

    taken: str
    note: str
    vendors: dict[str, dict[str, Price]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    def find(self, tool: str, model: str | None) -> Price | None:
        """The price of `model` as run by `tool` (None: not in the table).

        A model id is matched exactly, else as a table entry followed by a release date or tag
        (`claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`); a `provider/` prefix names the
        vendor, and `[1m]`-style suffixes are dropped.
        """
        if not model:
            return None
        name = model.strip().lower().split("[", 1)[0]
        vendor_named = None
        if "/" in name:
            vendor_named, name = name.rsplit("/", 1)[0].split("/")[-1], name.rsplit("/", 1)[1]
        name = self.aliases.get(name, name)
        if vendor_named is not None and vendor_named in self.vendors:
            vendors: tuple[str, ...] = (vendor_named,)
        else:
            vendors = TOOL_VENDORS.get(tool) or tuple(self.vendors)
        for vendor in vendors:
            models = self.vendors.get(vendor, {})
            if name in models:
                return models[name]
            for key in sorted(models, key=len, reverse=True):
                if name.startswith(key) and RELEASE_SUFFIX.fullmatch(name, len(key)):
                    return models[key]
        return None

    def merged(self, override: dict[str, dict[str, Price]]) -> PriceTable:
        """This table with `override`'s models added or replacing the shipped ones."""
        vendors = {vendor: dict(models) for vendor, models in self.vendors.items()}
        for vendor, models in override.items():
            vendors.setdefault(vendor, {}).update({name.lower(): price for name, price in models.items()})
        return dataclasses.replace(self, vendors=vendors)


def _price(data: dict[str, Any]) -> Price:
    def rate(key: str) -> float | None:
        return None if data.get(key) is None else float(data[key])

    return Price(input=float(data["input"]), output=float(data["output"]), cached_input=rate("cached_input"),
                 cache_write=rate("cache_write"), reasoning=rate("reasoning"))


_bundled: PriceTable | None = None
_with_user: tuple[tuple[str, int, int], PriceTable, dict[str, Any] | None] | None = None


def bundled_prices() -> PriceTable:
    """The price table shipped with agentbox."""
    global _bundled
    if _bundled is None:
        from agentbox.core import paths

        raw = json.loads((paths.PACKAGE_DIR / "data" / PRICES_FILE).read_text("utf-8"))
        _bundled = PriceTable(
            taken=str(raw["taken"]), note=str(raw["note"]),
            vendors={v: {m: _price(p) for m, p in models.items()} for v, models in raw["vendors"].items()},
            aliases={k.lower(): v.lower() for k, v in raw.get("aliases", {}).items()})
    return _bundled


def price_table(config_file: Path | None = None) -> PriceTable:
    """The shipped table with the user's config.yaml `prices:` over it (read again when the file changes).

    A config.yaml that does not validate raises its ConfigError (file, line, field; exit 2).
    """
    global _with_user
    from agentbox.core import paths

    path = config_file or paths.agent_box_home() / "config.yaml"
    try:
        stat = os.stat(path)
    except OSError:
        return bundled_prices()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if _with_user is not None and _with_user[0] == key:
        return _with_user[1]
    from agentbox.core.config.user_config import load_user_config

    prices = load_user_config(path).prices
    override = {vendor: {name: Price(**p.model_dump()) for name, p in models.items()} for vendor, models in prices.items()}
    table = bundled_prices().merged(override) if override else bundled_prices()
    raw = {vendor: {name: p.model_dump(exclude_none=True) for name, p in models.items()}
           for vendor, models in prices.items()} or None
    _with_user = (key, table, raw)
    return table


def user_prices(config_file: Path | None = None) -> dict[str, Any] | None:
    """The user's config.yaml `prices:` as JSON (None: no file, or no prices in it), read with `price_table`
    (again only when the file changed)."""
    from agentbox.core import paths

    path = config_file or paths.agent_box_home() / "config.yaml"
    if not path.is_file():
        return None
    price_table(path)
    return copy.deepcopy(_with_user[2]) if _with_user is not None else None


def priced(usage: Usage, *, tool: str, model: str | None, table: PriceTable, billing: str | None) -> Usage:
    """`usage` with its cost settled: the tool's own figure, else tokens × the table's price, else unknown."""
    if usage.cost_usd is not None:
        return dataclasses.replace(usage, cost_source="tool", billing=billing)
    price = table.find(tool, model)
    cost = price.cost(usage) if price is not None else None
    return dataclasses.replace(usage, cost_usd=cost, cost_source=None if cost is None else "price_table",
                               billing=billing)


def usd(value: float | None, unknown_turns: int = 0, subscription_turns: int = 0) -> str:
    """A cost as a person reads it: `$0.0123`, `unknown`, `$0.0123 + 2 turns unknown`, `… (subscription)`.

    A cost is never shown as $0 for turns nobody priced; turns on a subscription login are
    marked, since what they show is what their tokens would cost, not a bill.
    """
    if value is None:
        return "unknown"
    text = f"${value:.4f}" if value < 100 else f"${value:,.2f}"
    if unknown_turns:
        text += f" + {unknown_turns} turn{'s' if unknown_turns != 1 else ''} unknown"
    if subscription_turns:
        text += " (subscription)"
    return text


def cost_view(cost_usd: float | None, unknown_cost_turns: int, subscription_turns: int = 0) -> dict[str, Any]:
    """A cost for `--json` and MCP: the known sum (None: unknown), the turns not in it, the subscription turns."""
    return {"cost_usd": cost_usd, "cost_unknown_turns": unknown_cost_turns,
            "cost_known": cost_usd is not None and not unknown_cost_turns,
            "subscription_turns": subscription_turns}
