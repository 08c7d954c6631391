"""The push bodies in the public spec: libs.push_api's models, under names apart from the groups' `Subscription`.

`GET /v1/groups/{group}` already names its topics' filters `Subscription`; a push
subscription is a `PushSubscription` in the spec (and in generated SDKs). The
fields are the push service's own: the gateway passes its answers on as they are.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from libs.push_api import schemas as contract


class PushSubscription(contract.Subscription):
    """A push subscription: where and how the group's messages of the topic are POSTed, and what the push does now."""


class PushSubscriptionList(BaseModel):
    subscriptions: list[PushSubscription] = Field(description="by group, then topic")
