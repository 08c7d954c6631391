"""What each operation of the public API needs: the one table that both enforces and documents permissions.

An operation's needs are all required; each need is met by any of its actions on its
resource. The resource is named by a path parameter, or it is the whole cluster, or it
is found later by the handler (a message's topic, a transaction's): then the key must
hold some grant of the action to get that far, and the handler checks the name it found
(`gateway.auth.principal.reveal`: one the key may not use is answered as missing, 404).
Listing operations answer only what the key may see.

A name is checked as the public edge decoded it, once, and as the handler and every
internal call then use it (libs.http.paths quotes it on the way in). Only getTopic takes a
system topic's name, and checks it on what owns it (system_topic_need): a group's retry
and DLQ topics are that group's, the other system topics the cluster's.

The spec shows each operation's needs as `x-petrel-permissions`; docs/security.md
prints this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from libs.auth.grants import Action, ResourceKind
from libs.names import DLQ_PREFIX, RETRY_PREFIX, is_petrels_system_topic, system_topic_group

PUB, SUB, ADMIN = Action.PUBLISH, Action.SUBSCRIBE, Action.ADMIN
ANY: Final = (PUB, SUB, ADMIN)


@dataclass(frozen=True, slots=True)
class Need:
    actions: tuple[Action, ...]
    kind: ResourceKind
    param: str | None = None
    """the path parameter naming the resource; None: the whole cluster, or checked later / filtered"""
    later: str = ""
    """when the handler checks the resource it finds: what that resource is (the spec's words)"""
    system_topics: bool = False
    """the topic may be one of Petrel's system topics: then it is checked on what owns it (system_topic_need)"""

    def text(self) -> str:
        actions = " or ".join(action.value for action in self.actions)
        if self.kind == "cluster":
            return f"{actions} on the cluster"
        where = f"{{{self.param}}}" if self.param else f"({self.later})"
        if self.system_topics:
            where += (
                f" (a system topic: {RETRY_PREFIX}<group> and {DLQ_PREFIX}<group> need sub or admin on group <group>,"
                " the others admin on the cluster)"
            )
        return f"{actions} on {self.kind} {where}"

    def resource(self, path_params: Mapping[str, Any]) -> tuple[tuple[Action, ...], ResourceKind, str]:
        """What the check of this request names: its actions, the resource's kind and name (a path-named need)."""
        assert self.param is not None
        name = str(path_params[self.param])
        if self.system_topics and is_petrels_system_topic(name):
            return system_topic_need(name)
        return self.actions, self.kind, name


def system_topic_need(topic: str) -> tuple[tuple[Action, ...], ResourceKind, str]:
    """What describing a system topic needs: a group's retry or DLQ topic is its group's (as its lag and dead
    letters are: sub or admin); the others hold every topic's messages, the cluster's (admin)."""
    group = system_topic_group(topic)
    if group is not None:
        return (SUB, ADMIN), "group", group
    return (ADMIN,), "cluster", "*"


def on_topic(*actions: Action, param: str = "topic", system_topics: bool = False) -> Need:
    return Need(actions, "topic", param, system_topics=system_topics)


def on_group(*actions: Action, param: str = "group") -> Need:
    return Need(actions, "group", param)


def later(kind: ResourceKind, what: str, *actions: Action) -> Need:
    return Need(actions, kind, None, what)


CLUSTER_ADMIN: Final = Need((ADMIN,), "cluster")

NEEDS: Final[dict[str, tuple[Need, ...]]] = {
    # messages
    "sendMessage": (on_topic(PUB),),
    "sendMessageBatch": (on_topic(PUB),),
    "queryMessagesByKey": (on_topic(SUB),),
    "pullMessages": (on_topic(SUB),),
    "getQueueOffsets": (on_topic(SUB),),
    "getMessage": (later("topic", "the message's topic", SUB),),
    "traceMessage": (later("topic", "the message's topic", SUB),),
    "cancelScheduledMessage": (later("topic", "the message's topic", PUB, ADMIN),),
    # consuming
    "receiveMessages": (on_group(SUB), on_topic(SUB)),
    "ackMessages": (on_group(SUB),),
    "nackMessages": (on_group(SUB),),
    "changeVisibility": (on_group(SUB),),
    # transactions
    "sendTransaction": (on_topic(PUB), later("group", "the body's producer_group", PUB)),
    "commitTransaction": (later("topic", "the transaction's topic", PUB, ADMIN),),
    "rollbackTransaction": (later("topic", "the transaction's topic", PUB, ADMIN),),
    "getTransaction": (later("topic", "the transaction's topic", PUB, ADMIN),),
    "listTransactions": (later("topic", "listed: the transactions of topics the key may see", PUB, ADMIN),),
    "putProducerGroup": (on_group(ADMIN),),
    "getProducerGroup": (on_group(ADMIN),),
    "rotateProducerGroupSecret": (on_group(ADMIN),),
    "listProducerGroups": (later("group", "listed: the groups the key may administer", ADMIN),),
    # topics
    "putTopic": (on_topic(ADMIN),),
    "getTopic": (on_topic(*ANY, system_topics=True),),
    "deleteTopic": (on_topic(ADMIN),),
    "listTopics": (later("topic", "listed: the topics the key may describe", *ANY),),
    # timers
    "getTimerStats": (CLUSTER_ADMIN,),
    # cluster
    "getCluster": (CLUSTER_ADMIN,),
    "getOverview": (CLUSTER_ADMIN,),
    # consumer groups
    "putGroup": (on_group(ADMIN),),
    "getGroup": (on_group(SUB, ADMIN),),
    "deleteGroup": (on_group(ADMIN),),
    "listGroups": (later("group", "listed: the groups the key may subscribe to or administer", SUB, ADMIN),),
    "getGroupLag": (on_group(SUB, ADMIN),),
    "getGroupLagHistory": (on_group(SUB, ADMIN),),
    "resetGroupOffsets": (on_group(ADMIN), on_topic(SUB, ADMIN)),
    "peekDeadLetters": (
        on_group(SUB, ADMIN),
        later("topic", "listed: the dead letters of topics the key may read", SUB),
    ),
    "redriveDeadLetters": (
        on_group(ADMIN),
        later("topic", "the dead letters' topics: others stay in the DLQ", SUB, ADMIN),
    ),
    # push subscriptions
    "putSubscription": (on_group(ADMIN), on_topic(SUB, ADMIN)),
    "getSubscription": (on_group(ADMIN),),
    "deleteSubscription": (on_group(ADMIN),),
    "listSubscriptions": (on_group(ADMIN),),
    "listAllSubscriptions": (later("group", "listed: the subscriptions of the groups the key may administer", ADMIN),),
    "pauseSubscription": (on_group(ADMIN),),
    "resumeSubscription": (on_group(ADMIN),),
    "rotateSubscriptionSecret": (on_group(ADMIN),),
    "listPushAttempts": (on_group(ADMIN),),
    # keys
    "createKey": (CLUSTER_ADMIN,),
    "listKeys": (CLUSTER_ADMIN,),
    "getKey": (CLUSTER_ADMIN,),
    "revokeKey": (CLUSTER_ADMIN,),
}
"""operationId -> what it needs; a /v1 route missing here refuses to be built."""


def is_admin_operation(needs: tuple[Need, ...]) -> bool:
    """Audited as `admin_call`: some need of it can be met only by admin (an offset reset needs admin on the group
    and subscribe or admin on the topic)."""
    return any(need.actions == (ADMIN,) for need in needs)
