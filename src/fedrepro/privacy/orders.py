"""The RDP order grid, explicit so every result can record which orders its minimum was taken over.

DEFAULT_ORDERS is the TF-Privacy / opacus grid {1.1, 1.2, ..., 10.9} U {12, 13, ..., 63} (99 + 52 = 151 orders):
opacus.accountants.RDPAccountant.DEFAULT_ALPHAS, and the grid TF-Privacy used when FedHDP and PPSGD computed
their epsilons. dp-accounting's own default (dp_accounting.rdp.DEFAULT_RDP_ORDERS) differs (it adds 11 and
128..1024); we never use it implicitly. EXTENDED_ORDERS adds 128, 256, 512 and 1024 for very small epsilons /
large noise, where the optimum sits at the grid's upper edge (results then say ``order_at_grid_edge``).
"""

from __future__ import annotations

DEFAULT_ORDERS: tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(12, 64)])
EXTENDED_ORDERS: tuple[float, ...] = DEFAULT_ORDERS + (128.0, 256.0, 512.0, 1024.0)
INTEGER_ORDERS: tuple[float, ...] = tuple(float(a) for a in range(2, 64))


def at_edge(orders, order) -> bool:
    """True when the optimal order is the smallest or largest of the grid (the grid may be too narrow)."""
    return order is not None and (order <= min(orders) or order >= max(orders))
