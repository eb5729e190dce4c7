"""moto's server, its SQS queues made safe under concurrent requests.

The local stand-in starts moto through this file (`stand_in::Moto::start`), with
moto_server's own arguments: `python moto_launch.py -H 127.0.0.1 -p PORT`.

moto_server answers each request on a thread of its own. In moto 5.2.5 (pinned in
requirements.txt beside this file) SendMessage appends to a queue's message list
under the queue's lock (`Queue._messages_lock`), but DeleteMessage rebuilds that list
without the lock and assigns it back: a message appended while a delete copies the
list is dropped, after SendMessage answered with its id. Two receives at once can
also hand out one message twice, and a receive that moves a message to the
dead-letter queue can race a delete the same way.

Here every SQS method that reads and replaces a queue's list, or picks messages from
it, holds that same lock. It is a `threading.Condition` over a reentrant lock:
`add_message` takes it again inside a locked receive, and a long-polling receive
waits on the condition, which releases the lock while it waits.

A FIFO queue's receive is left as moto has it: with every visible message in a group
still in flight, moto's receive loops without waiting, and it would hold the lock
for the whole poll. The project's queues are standard queues.

It also counts every SQS request moto answers, as SQS bills them (`count_sqs_requests`):
what a run costs in SQS is counted here, where the requests are served, not from what
a client meant to send. `GET /_shardline/sqs-requests` on the server answers the counts
so far as JSON: `{"SendMessage": {"calls": 2, "requests": 5}, ...}`, by action.
"""

import functools
import json
import math
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.server import main
from moto.sqs import models, responses


def _with_queue_lock(method):
    """A `Queue` method run under the queue's own lock."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._messages_lock:
            return method(self, *args, **kwargs)

    return locked


def _with_named_queue_lock(method):
    """An `SQSBackend` method on `queue_name` run under that queue's lock."""

    @functools.wraps(method)
    def locked(self, queue_name, *args, **kwargs):
        queue = self.get_queue(queue_name)
        if queue.fifo_queue:
            return method(self, queue_name, *args, **kwargs)
        with queue._messages_lock:
            return method(self, queue_name, *args, **kwargs)

    return locked


def make_sqs_safe():
    """Wraps moto's SQS methods that replace or pick from a queue's messages."""
    models.Queue.delete_message = _with_queue_lock(models.Queue.delete_message)
    for name in ("receive_message", "change_message_visibility", "purge_queue"):
        method = getattr(models.SQSBackend, name)
        setattr(models.SQSBackend, name, _with_named_queue_lock(method))


# SQS bills each 64-KB chunk of a request's payload as one request; a request without a
# payload (a delete, an empty receive) is one.
CHUNK = 64 * 1024
COUNTS_PATH = "/_shardline/sqs-requests"

_counts = {}
_counts_lock = threading.Lock()
# The payload of the request this thread is answering, set by the actions that carry one.
_payload = threading.local()


def billed_requests(payload_bytes):
    """Requests SQS bills for a call whose messages hold `payload_bytes`."""
    return max(1, math.ceil(payload_bytes / CHUNK))


def attributes_bytes(attributes):
    """A message's attributes as SQS sizes them: each name, type and value."""
    size = 0
    for name, value in (attributes or {}).items():
        size += len(name.encode())
        for field in ("DataType", "StringValue", "BinaryValue", "data_type", "string_value", "binary_value"):
            v = value.get(field)
            if v is not None:
                size += len(v) if isinstance(v, bytes) else len(str(v).encode())
    return size


def message_bytes(body, attributes):
    """A message's size as SQS meters it: its body and its attributes."""
    return len((body or "").encode()) + attributes_bytes(attributes)


def _sent_payload(method, entries_of):
    @functools.wraps(method)
    def counted(self, *args, **kwargs):
        _payload.bytes = sum(message_bytes(b, a) for b, a in entries_of(self))
        return method(self, *args, **kwargs)

    return counted


def _received_payload(method):
    @functools.wraps(method)
    def counted(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        messages = (getattr(result, "result", None) or {}).get("Messages", [])
        _payload.bytes = sum(message_bytes(m.get("Body"), m.get("MessageAttributes")) for m in messages)
        return result

    return counted


def _counted_action(call_action):
    @functools.wraps(call_action)
    def counted(self, *args, **kwargs):
        action = self._get_action()
        _payload.bytes = 0
        answer = call_action(self, *args, **kwargs)
        # A request answered with an error is not counted: a run without faults has none.
        if int(answer[0]) < 400:
            with _counts_lock:
                count = _counts.setdefault(action, {"calls": 0, "requests": 0})
                count["calls"] += 1
                count["requests"] += billed_requests(_payload.bytes)
        return answer

    return counted


def counts():
    """The counts so far, by action."""
    with _counts_lock:
        return {action: dict(count) for action, count in _counts.items()}


def _answering_counts(dispatch):
    @functools.wraps(dispatch)
    def answer(self, environ, start_response):
        if environ.get("PATH_INFO") == COUNTS_PATH and environ.get("REQUEST_METHOD") == "GET":
            body = json.dumps(counts()).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        return dispatch(self, environ, start_response)

    return answer


def count_sqs_requests():
    """Counts each SQS request moto answers, and answers the counts on `COUNTS_PATH`."""
    sqs = responses.SQSResponse
    sqs.send_message = _sent_payload(
        sqs.send_message,
        lambda r: [(r._get_param("MessageBody"), r._get_param("MessageAttributes", {}))],
    )
    sqs.send_message_batch = _sent_payload(
        sqs.send_message_batch,
        lambda r: [(e.get("MessageBody"), e.get("MessageAttributes")) for e in r._get_param("Entries", [])],
    )
    sqs.receive_message = _received_payload(sqs.receive_message)
    sqs.call_action = _counted_action(sqs.call_action)
    DomainDispatcherApplication.__call__ = _answering_counts(DomainDispatcherApplication.__call__)


if __name__ == "__main__":
    make_sqs_safe()
    count_sqs_requests()
    # The server's log says which moto it is.
    print("moto_launch: SQS queues locked, requests counted", file=sys.stderr, flush=True)
    sys.exit(main())
