"""JSON-schema fragments the experiment kinds' parameter schemas share (one definition of "a positive number")."""

POSITIVE = {"type": "number", "exclusiveMinimum": 0}
NONNEG = {"type": "number", "minimum": 0}
UNIT = {"type": "number", "minimum": 0, "maximum": 1}
INT0 = {"type": "integer", "minimum": 0}
INT1 = {"type": "integer", "minimum": 1}
INT2 = {"type": "integer", "minimum": 2}
INT3 = {"type": "integer", "minimum": 3}
DELTA = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
POSITIVE_LIST = {"type": "array", "minItems": 1, "uniqueItems": True, "items": POSITIVE}
