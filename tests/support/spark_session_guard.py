"""A pytest plugin that keeps the worker's shared SparkSession usable after a test was stopped in the middle of a call.

pytest-timeout's signal method (the one on Linux) raises `Failed` from a SIGALRM handler in the main thread,
wherever that thread is: often inside py4j, waiting for the JVM's answer to a Spark call. In pinned-thread mode
(pyspark's default) the main thread has one py4j connection, and an answer nobody read stays on it: pyspark's
call-site `__exit__` sends its own command on the same connection, reads the abandoned call's answer as its own,
and leaves its answer for the next call, and so on (`'JavaPackage' object is not callable`, `_jsc.sc()` None,
py4j KeyErrors) in every later test of the worker. So after a test phase stopped that way, this thread's
connection is closed (the next call opens a new one, in step, served by a new JVM thread: the session is made its
active one again) and the jobs it left are cancelled.
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession


def discard_thread_connection(session: SparkSession) -> bool:
    """Close this thread's py4j connection, whatever answers it still owes, and cancel the Spark jobs left running.

    True when there was a connection to close (pinned threads); a plain gateway drops a connection that
    raised mid-call rather than reusing it.
    """
    context = session.sparkContext
    client = context._gateway._gateway_client  # type: ignore[union-attr]
    thread_connection = getattr(client, "get_thread_connection", None)
    connection = thread_connection() if thread_connection is not None else None
    if connection is None or connection.socket is None:
        return False
    if any(pooled is connection for pooled in client.deque):
        client.deque.remove(connection)
    connection.close(reset=True)
    context._jvm.SparkSession.setActiveSession(session._jsparkSession)  # type: ignore[union-attr]  # a new connection
    context.cancelAllJobs()
    return True


def stopped_mid_call(call: pytest.CallInfo[None]) -> bool:
    """A phase ended by something that is not an Exception (pytest-timeout's `Failed`, KeyboardInterrupt): py4j
    handles only Exceptions, so a Spark call it cut off left its connection out of step."""
    return call.excinfo is not None and not isinstance(call.excinfo.value, Exception)


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """After the setup, call or teardown that was stopped, before anything else calls Spark."""
    session = SparkSession._instantiatedSession  # the worker's shared one, if started
    if session is not None and stopped_mid_call(call) and discard_thread_connection(session):
        item.add_report_section(call.when, "spark", "the py4j connection of a call stopped mid-way was closed")
