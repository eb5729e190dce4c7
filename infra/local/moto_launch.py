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
"""

import functools
import sys

from moto.server import main
from moto.sqs import models


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


if __name__ == "__main__":
    make_sqs_safe()
    # The server's log says which moto it is.
    print("moto_launch: SQS queues locked", file=sys.stderr, flush=True)
    sys.exit(main())
