"""internal_path: the one way an internal client puts a name into a URL path.

A name (a topic, a group, a message id, a broker name) is decoded exactly once, by the
server that receives it. So every segment an internal client fills in is percent-encoded
whole, `/`, `%`, `?` and `#` included: a system topic such as `%DLQ%billing` arrives as
`%DLQ%billing` whatever hex digits follow its `%`, and a `%70ayroll` the public edge let
through would arrive as `%70ayroll`, never as `payroll`. A segment that a path would read
as a step up or in place (`..`, `.`) or as nothing is refused: no name is one. (A `/`
travels encoded too, but a receiving router matches the decoded path, where it would
split the segment: no name has one, libs.names sees to that at the edge.)

    internal_path("/internal/topics/{topic}/queues/{queue_id}/messages", topic="%DLQ%b", queue_id=0)
    # "/internal/topics/%25DLQ%25b/queues/0/messages"
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote

_NOT_A_NAME: Final = frozenset({"", ".", ".."})


def internal_path(template: str, **segments: str | int) -> str:
    """The template with each `{name}` replaced by its segment, percent-encoded (every name of the template needed)."""
    return template.format_map({name: path_segment(value) for name, value in segments.items()})


def path_segment(value: str | int) -> str:
    """One path segment that the receiving server decodes back to `value` exactly."""
    text = str(value)
    if text in _NOT_A_NAME:
        raise ValueError(f"{text!r} cannot be a path segment: it names no resource")
    return quote(text, safe="")
