"""``only_methods``: a learning protocol's run that trains some of its methods (a forensic reading of a few methods,
one method's rerun, or a table split into jobs). Methods train alike alone or beside the others (each run draws one
seed shared by every method: the same initialization and data order), so such a run's methods are those of the
whole run."""

from __future__ import annotations

from collections.abc import Mapping

from fedrepro.errors import ConfigError

# the schema fragment: names of ``methods``; a kind that states no default keeps the parameter digest of runs made
# before it had the option (absent = every method)
ONLY_METHODS = {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string"}}


def trained(p: Mapping) -> dict:
    """The methods this run trains: ``methods``, or those of them ``only_methods`` names, in ``methods``' order."""
    only = p.get("only_methods")
    return {k: v for k, v in p["methods"].items() if only is None or k in only}


def validate(p: Mapping, exp_id: str) -> None:
    """A ConfigError naming ``only_methods``' names that are not methods of the run."""
    unknown = sorted(set(p.get("only_methods") or ()) - set(p["methods"]))
    if unknown:
        raise ConfigError(f"{exp_id}: params.only_methods: unknown methods {unknown} (known: {sorted(p['methods'])})")
