"""The controller's HTTP API (libs.controller_api): the view of every broker name, read from etcd, naming the leader.

Brokers do not call it: they read and write their keys in etcd (services.broker.controller_link).
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import APIRouter, Depends, Request

from libs.controller_api import VIEW_PATH, ControllerView
from libs.errors import NotFound, ServiceUnavailable
from libs.etcd import EtcdClient, EtcdError
from libs.problem import PROBLEM_RESPONSES
from services.nameserver.controller_view import read_view


async def _etcd(request: Request) -> EtcdClient:
    client = getattr(request.state, "etcd", None)
    if client is None:
        raise NotFound(
            "this nameserver knows no etcd (PETREL_ETCD_ENDPOINTS), where the controller "
            "(PETREL_NAMESERVER_CONTROLLER=true) keeps its state"
        )
    return cast(EtcdClient, client)


EtcdDep = Annotated[EtcdClient, Depends(_etcd)]

router = APIRouter(tags=["controller"], responses=PROBLEM_RESPONSES)


@router.get(VIEW_PATH, operation_id="getControllerView", response_model=ControllerView)
async def view(client: EtcdDep) -> ControllerView:
    """Which nameserver's controller leads, and every broker name's master, epoch, in-sync set and live replicas."""
    try:
        return await read_view(client)
    except EtcdError as exc:
        raise ServiceUnavailable(f"etcd did not answer: {exc}") from exc
