"""How the JSON the traces app hands out writes money and moments: the download
(``export.records``), the cancellation audit and the REST API use these, so one figure reads the
same everywhere."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def usd(amount: Decimal | None) -> str | None:
    """Money as a plain decimal string: "0", "0.000597", "12.5" (never "0E-10")."""
    if amount is None:
        return None
    text = format(Decimal(amount).normalize(), "f")
    return "0" if text in ("-0", "0") else text
