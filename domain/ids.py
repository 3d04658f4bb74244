"""The one grammar of an id: of a table, a player, a round, a shoe, an API key, an operator.

An id is 1 to 64 ASCII letters, digits, `_`, `-` and `.`, and does not start with `.`. So an
id is safe as a URL path segment, a file name and a log field, and:
- it is never `.` or `..`, which URLs and file systems read as "here" and "up" (nor any
  other dot-only or hidden-file name);
- it never holds `/` or `:`, which the service keeps to join ids into one name (a stream is
  `table:T1`; an operator's player is `operator/player`), so a joined name splits one way.
"""

import re
from typing import Final

MAX_ID_LENGTH: Final = 64
ID_PATTERN: Final = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"
"""The grammar as a regular expression, for documents such as the OpenAPI description."""
ID_RULE: Final = "1 to 64 letters, digits, '_', '-' or '.', not starting with '.'"
"""The grammar in words, for messages."""

# fullmatch, not `$`: in Python `$` also matches before a trailing newline.
_ID: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


def is_id(value: object) -> bool:
    """Whether `value` is a string that follows the id grammar."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None
