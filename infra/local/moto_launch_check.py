"""The race moto_launch.py closes, played step by step on moto's SQS models.

Two messages are received; a first delete is held in the middle of its copy of the
queue's list (after the first message, before the second); a second delete and a
send then run; then the first delete goes on. On moto as installed, the first delete
assigns its copy last: the message sent in between is gone after SendMessage returned
its id, and the message the second delete removed is back. With the launcher's locks,
the second delete and the send wait for the first, and the queue ends holding exactly
the sent message.

Prints one line per run; exits 1 unless moto as installed shows the race and the
launcher's moto does not. `stand_in`'s tests run it with the project venv's python.
"""

import sys
import threading
import time

from moto.sqs import models

import moto_launch

ACCOUNT, REGION = "123456789012", "us-east-1"
FIRST = "first-delete"
# How long the second delete and the send get to finish while the first is held: on
# moto as installed they finish at once; under the launcher's lock they cannot.
WAIT = 2.0


def play(queue_name):
    """Plays the interleaving on a new queue; returns (lost, revived) message counts."""
    backend = models.sqs_backends[ACCOUNT][REGION]
    backend.create_queue(queue_name, VisibilityTimeout="600")
    first, second = (backend.send_message(queue_name, body) for body in ("m1", "m2"))
    handles = {m.id: m.receipt_handle for m in backend.receive_message(queue_name, 10, 0, 600)}

    held, go_on = threading.Event(), threading.Event()
    original = models.Message.had_receipt_handle

    def had_receipt_handle(message, receipt_handle):
        # The first delete's `any` stops at the first message; its copy then asks the
        # second message: hold it there, once.
        if threading.current_thread().name == FIRST and message.id == second.id:
            if not held.is_set():
                held.set()
                go_on.wait(10)
        return original(message, receipt_handle)

    models.Message.had_receipt_handle = had_receipt_handle
    sent = []
    try:
        delete_first = threading.Thread(
            name=FIRST, target=backend.delete_message, args=(queue_name, handles[first.id])
        )
        delete_first.start()
        if not held.wait(10):
            raise RuntimeError("the first delete never reached the second message")
        others = [
            threading.Thread(target=backend.delete_message, args=(queue_name, handles[second.id])),
            threading.Thread(target=lambda: sent.append(backend.send_message(queue_name, "m3"))),
        ]
        for t in others:
            t.start()
        deadline = time.monotonic() + WAIT
        for t in others:
            t.join(max(0.0, deadline - time.monotonic()))
        go_on.set()
        for t in [delete_first, *others]:
            t.join(10)
    finally:
        models.Message.had_receipt_handle = original

    held_ids = {m.id for m in backend.get_queue(queue_name)._messages}
    lost = sum(1 for m in sent if m.id not in held_ids)
    revived = len({first.id, second.id} & held_ids)
    return lost, revived


def main():
    bare = play("race-bare")
    print(f"moto as installed: {bare[0]} sent message lost, {bare[1]} deleted message back")
    moto_launch.make_sqs_safe()
    locked = play("race-locked")
    print(f"moto_launch.py: {locked[0]} sent message lost, {locked[1]} deleted message back")
    if bare == (0, 0):
        print("moto as installed did not show the race: this check proves nothing")
        return 1
    if locked != (0, 0):
        print("the launcher's moto still loses or revives messages")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
