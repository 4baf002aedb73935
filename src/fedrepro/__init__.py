"""fedrepro: every reported number of four private/personalized FL papers as a rebuildable target."""

__version__ = "0.1.0"
