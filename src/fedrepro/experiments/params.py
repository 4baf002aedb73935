"""JSON-schema fragments the experiment kinds' parameter schemas share (one definition of "a positive number").

Every "number" is finite (fedrepro.config.validate refuses NaN and infinities); a parameter that may be infinite
says so with ``{"anyOf": [..., INF]}``.
"""

import math

POSITIVE = {"type": "number", "exclusiveMinimum": 0}
NONNEG = {"type": "number", "minimum": 0}
UNIT = {"type": "number", "minimum": 0, "maximum": 1}
INT0 = {"type": "integer", "minimum": 0}
INT1 = {"type": "integer", "minimum": 1}
INT2 = {"type": "integer", "minimum": 2}
INT3 = {"type": "integer", "minimum": 3}
DELTA = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
POSITIVE_LIST = {"type": "array", "minItems": 1, "uniqueItems": True, "items": POSITIVE}
INF = {"const": math.inf}  # the one non-finite value a schema may allow, explicitly (e.g. PPSGD's alpha = inf)
