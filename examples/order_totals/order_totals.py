"""Per customer, the number of orders and their running total, updated with every order.

Input records: key = the customer id, value = the order's amount ("12.50").
Output records: key = the customer id, value = JSON {"orders": n, "total": t, "big": b},
where b says whether this order reached `[job.params] big_order`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from processor import Context, Emitted, Job, Record, State


class OrderTotals(Job):
    def setup(self, context: Context) -> None:
        self.big = float(self.params.get("big_order", 100))

    def process(self, record: Record, state: State) -> Iterator[Emitted]:
        amount = float(record.value or 0)
        totals = state.setdefault(record.key, {"orders": 0, "total": 0.0})
        totals["orders"] += 1                          # changing it in place is a write
        totals["total"] = round(totals["total"] + amount, 2)
        yield record.key, json.dumps({**totals, "big": amount >= self.big})
