"""Metric-key spellings several kinds share (registry rows name these keys, so they are spelled once)."""


def eps_key(eps: float) -> str:
    """Metric key of a target epsilon: 3.35 -> eps_3p35, 27.3 -> eps_27p30."""
    return "eps_" + f"{eps:.2f}".replace(".", "p")
