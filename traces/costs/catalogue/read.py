"""Reading the community model catalogue: LiteLLM's ``model_prices_and_context_window.json``,
or our own compact form of it (the shipped snapshot, and what a preview keeps until it is
confirmed).

LiteLLM's file is one object keyed by model; each entry names its ``litellm_provider`` and
``mode`` and gives prices in USD *per token*. We keep the rows agentsite can use:

* providers: ``openai`` and ``anthropic`` (our two provider kinds) and ``gemini`` (Google's
  models, reached through OpenAI-compatible gateways; its keys ``gemini/<model>`` lose the
  prefix). Rows of other providers, and keys that still hold a ``/`` (a route, not a model
  name), are left out;
* modes: ``chat`` and ``responses``; embeddings, images, audio and the rest are skipped;
* names exactly as the catalogue writes them: no name is derived from another, so no model is
  ever priced by a sibling (``traces.costs.pricing`` then matches requests exactly, by alias, or by
  a version suffix);
* prices: input and output are required; per-token numbers become per-million ``Decimal``s
  exactly (``Decimal(str(x))`` moved six places: 1.25e-07 -> 0.125), at most six decimals; an
  absent cache price stays empty (the table reads that as the input rate); a reasoning-token
  price other than the output price cannot be kept and skips the row;
* limits: ``max_input_tokens`` (the context window) and ``max_output_tokens`` (else
  ``max_tokens``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils.dateparse import parse_datetime

COMPACT_FORMAT = "agentsite.catalogue/1"
# litellm_provider -> (vendor in our table, prefix its keys carry)
PROVIDERS: dict[str, tuple[str, str]] = {
    "openai": ("openai", "openai/"),
    "anthropic": ("anthropic", "anthropic/"),
    "gemini": ("google", "gemini/"),
}
MODES = frozenset({"chat", "responses"})
MAX_DECIMALS = 6  # ModelPrice's rate columns
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+\-]{0,199}")
TIER = re.compile(r"^input_cost_per_token_above_(\d+)k_tokens$")
RATES = ("input", "output", "cache_write", "cache_read")


class CatalogueError(ValueError):
    """The document is not a model catalogue we can read (the message says why)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One model of the catalogue, in our units (USD per million tokens)."""

    model: str
    vendor: str
    key: str
    input: Decimal
    output: Decimal
    cache_write: Decimal | None = None
    cache_read: Decimal | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    source: str = ""  # the catalogue's own link for this model (its pricing page)
    note: str = ""  # what the table does not model (long-prompt tiers), deprecation

    @property
    def rates(self) -> tuple[Decimal | None, ...]:
        return (self.input, self.output, self.cache_write, self.cache_read)

    def to_compact(self) -> dict[str, Any]:
        data = asdict(self)
        for name in RATES:
            data[name] = None if data[name] is None else format(data[name], "f")
        return data


@dataclass(frozen=True, slots=True)
class Skip:
    key: str
    reason: str


@dataclass
class Catalogue:
    """What was read: the usable entries, the skipped rows of our providers with the reason,
    how many rows belong to providers agentsite does not use, and where it all came from."""

    entries: list[Entry] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    other_providers: int = 0
    source: str = ""
    version: str = ""
    read_at: datetime | None = None

    def to_compact(self) -> dict[str, Any]:
        return {"format": COMPACT_FORMAT, "source": self.source, "version": self.version,
                "read_at": self.read_at.isoformat() if self.read_at else None,
                "models": [e.to_compact() for e in self.entries]}

    def to_json(self) -> str:
        """The compact form as text, one model a line (small, and a refresh diffs by model)."""
        data = self.to_compact()
        models = data.pop("models")
        head = json.dumps(data, ensure_ascii=False)[:-1]
        lines = ",\n".join("  " + json.dumps(m, ensure_ascii=False) for m in models)
        return f"{head},\n \"models\": [\n{lines}\n]}}\n"


# -- numbers ------------------------------------------------------------------------------------------
class _Bad(ValueError):
    pass


def per_million(value: Any, what: str) -> Decimal:
    """A per-token price as dollars per million tokens, exactly."""
    return _rate(value, what, shift=6)


def _rate(value: Any, what: str, *, shift: int = 0) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _Bad(f"the {what} price is not a number")
    try:
        number = Decimal(str(value)).scaleb(shift)
    except InvalidOperation:
        raise _Bad(f"the {what} price is not a number") from None
    if not number.is_finite() or number < 0:
        raise _Bad(f"the {what} price is not a price")
    number = number.normalize()
    if number.as_tuple().exponent < -MAX_DECIMALS:  # type: ignore[operator]
        raise _Bad(f"the {what} price is finer than the table keeps ({MAX_DECIMALS} decimals "
                   "per million tokens)")
    # normalize() writes 10 as 1E+1; the value is the same, the plain form reads better.
    return number.quantize(Decimal(1)) if number == number.to_integral_value() else number


def _link(value: Any) -> str:
    """A model's pricing page: only an https link is kept (it is shown as a link)."""
    text = value.strip() if isinstance(value, str) else ""
    return text if text.startswith("https://") and not any(c.isspace() for c in text) else ""


def _tokens(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = int(value)
    return number if number > 0 and number == value else None


# -- LiteLLM's file -----------------------------------------------------------------------------------
def _entry(key: str, item: Mapping[str, Any], vendor: str, prefix: str) -> Entry:
    mode = item.get("mode")
    if mode not in MODES:
        raise _Bad(f"mode “{mode}”, not a chat model")
    model = key[len(prefix):] if key.startswith(prefix) else key
    if "/" in model or not MODEL_NAME.fullmatch(model):
        raise _Bad("not a plain model name")
    if model.startswith("ft:"):
        raise _Bad("a fine-tuning base: fine-tuned models are named per organisation, "
                   "price them as a team's own rows")
    if item.get("input_cost_per_token") is None or item.get("output_cost_per_token") is None:
        raise _Bad("no input and output price")
    inp = per_million(item["input_cost_per_token"], "input")
    out = per_million(item["output_cost_per_token"], "output")
    write = item.get("cache_creation_input_token_cost")
    read = item.get("cache_read_input_token_cost")
    reasoning = item.get("output_cost_per_reasoning_token")
    if reasoning is not None and per_million(reasoning, "reasoning") != out:
        raise _Bad("reasoning tokens cost other than output tokens, which the table cannot price")
    notes = []
    tiers = sorted(int(m.group(1)) for m in map(TIER.match, item) if m)
    if tiers:
        notes.append(f"Prompts over {tiers[0]}k tokens cost more; not modelled.")
    if isinstance(item.get("deprecation_date"), str) and item["deprecation_date"].strip():
        notes.append(f"Deprecated from {item['deprecation_date'].strip()[:10]}.")
    source = item.get("source")
    return Entry(
        model=model, vendor=vendor, key=key, input=inp, output=out,
        cache_write=None if write is None else per_million(write, "cache write"),
        cache_read=None if read is None else per_million(read, "cache read"),
        context_window=_tokens(item.get("max_input_tokens")),
        max_output_tokens=_tokens(item.get("max_output_tokens")) or _tokens(item.get("max_tokens")),
        source=_link(source), note=" ".join(notes))


def read_litellm(data: Mapping[str, Any]) -> Catalogue:
    catalogue = Catalogue()
    found: dict[str, Entry] = {}
    conflicts: dict[str, list[str]] = {}
    for key, item in data.items():
        if key == "sample_spec":
            catalogue.skipped.append(Skip(key, "the format's own description"))
            continue
        if not isinstance(item, dict):
            catalogue.skipped.append(Skip(str(key), "not an object"))
            continue
        provider = PROVIDERS.get(item.get("litellm_provider"))  # type: ignore[arg-type]
        if provider is None:
            catalogue.other_providers += 1
            continue
        try:
            entry = _entry(str(key), item, *provider)
        except _Bad as exc:
            catalogue.skipped.append(Skip(str(key), str(exc)))
            continue
        name = entry.model.lower()
        seen = found.get(name)
        if seen is None:
            found[name] = entry
        elif seen.rates != entry.rates:
            conflicts.setdefault(name, [seen.key]).append(entry.key)
        elif entry.key.startswith(PROVIDERS[item["litellm_provider"]][1]):
            found[name] = entry  # the same prices twice: the provider-qualified key is canonical
    for name, keys in conflicts.items():
        del found[name]
        catalogue.skipped.extend(Skip(k, "listed more than once with different prices ("
                                         + ", ".join(keys) + ")") for k in keys)
    catalogue.entries = sorted(found.values(), key=lambda e: (e.vendor, e.model))
    return catalogue


# -- our compact form ---------------------------------------------------------------------------------
def read_compact(data: Mapping[str, Any]) -> Catalogue:
    models = data.get("models")
    if not isinstance(models, list):
        raise CatalogueError("The catalogue has no “models” list.")
    entries = []
    for index, item in enumerate(models, start=1):
        try:
            if not isinstance(item, dict) or not MODEL_NAME.fullmatch(str(item.get("model") or "")):
                raise _Bad("no model name")
            rates = {n: None if item.get(n) is None else _rate(item[n], n.replace("_", " "))
                     for n in RATES}
            if rates["input"] is None or rates["output"] is None:
                raise _Bad("no input and output price")
            entries.append(Entry(
                model=item["model"], vendor=str(item.get("vendor") or "")[:32],
                key=str(item.get("key") or item["model"]), **rates,  # type: ignore[arg-type]
                context_window=_tokens(item.get("context_window")),
                max_output_tokens=_tokens(item.get("max_output_tokens")),
                source=_link(item.get("source")), note=str(item.get("note") or "")[:200]))
        except _Bad as exc:
            raise CatalogueError(f"Model {index}: {exc}.") from None
    read_at = parse_datetime(str(data.get("read_at") or ""))
    return Catalogue(entries=entries, source=str(data.get("source") or ""),
                     version=str(data.get("version") or ""), read_at=read_at)


def catalogue_read(raw: bytes | str | Mapping[str, Any], *, source: str = "", version: str = "",
                   read_at: datetime | None = None) -> Catalogue:
    """A catalogue from LiteLLM's file or our compact form (told apart by ``format``)."""
    data: Any = raw
    if isinstance(raw, (bytes, str)):
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise CatalogueError(f"The file is not JSON: {exc}.") from exc
    if not isinstance(data, dict):
        raise CatalogueError("Expected a JSON object of models, as in "
                             "model_prices_and_context_window.json.")
    if data.get("format") == COMPACT_FORMAT:
        catalogue = read_compact(data)
        catalogue.source = catalogue.source or source
    else:
        catalogue = read_litellm(data)
        catalogue.source = source
        if not catalogue.entries and not catalogue.skipped:
            raise CatalogueError("No models of OpenAI, Anthropic or Google in this file: is it "
                                 "model_prices_and_context_window.json?")
    catalogue.version = version or catalogue.version
    catalogue.read_at = read_at or catalogue.read_at
    return catalogue
