"""The controller's HTTP API (libs.controller_api): reports, in-sync changes, and the view of every broker name."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import APIRouter, Depends, Request

from libs.controller_api import Assignment, BrokerReport, ControllerView, InSyncChange
from libs.errors import NotFound
from libs.problem import PROBLEM_RESPONSES
from services.nameserver.controller import Controller
from services.nameserver.params import BrokerId, BrokerName


async def _controller(request: Request) -> Controller:
    controller = getattr(request.state, "controller", None)
    if controller is None:
        raise NotFound("this nameserver runs no controller (PETREL_NAMESERVER_CONTROLLER=true starts one)")
    return cast(Controller, controller)


ControllerDep = Annotated[Controller, Depends(_controller)]

router = APIRouter(prefix="/internal/controller", tags=["controller"], responses=PROBLEM_RESPONSES)


@router.put("/{broker_name}/in-sync", operation_id="changeInSyncSet", response_model=Assignment)
async def change_in_sync(controller: ControllerDep, broker_name: BrokerName, body: InSyncChange) -> Assignment:
    """A master's new in-sync set; 409 stale-epoch when it is no longer the master at that epoch."""
    return controller.change_in_sync(broker_name, body)


@router.put("/{broker_name}/{broker_id}", operation_id="reportToController", response_model=Assignment)
async def report(
    controller: ControllerDep,
    broker_name: BrokerName,
    broker_id: BrokerId,
    body: BrokerReport,
) -> Assignment:
    """A broker's heartbeat to the controller; answered with its broker name's master, epoch and in-sync set."""
    return controller.report(broker_name, broker_id, body)


@router.get("", operation_id="getControllerView", response_model=ControllerView)
async def view(controller: ControllerDep) -> ControllerView:
    """Every broker name the controller knows: master, epoch, in-sync set, and what each broker last said."""
    return controller.view()
