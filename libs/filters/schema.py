"""The filter a consumer names at the HTTP edge (receive, push subscriptions): one public schema."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from libs.filters import MAX_EXPRESSION_LENGTH, FilterType


class MessageFilter(BaseModel):
    """Which messages a receive takes: a TAG expression (TagA || TagB, *) or SQL92 over properties and TAGS."""

    model_config = ConfigDict(extra="forbid")

    type: FilterType = Field(default=FilterType.TAG, description="TAG or SQL92")
    expression: str = Field(min_length=1, max_length=MAX_EXPRESSION_LENGTH, description="the filter expression")
