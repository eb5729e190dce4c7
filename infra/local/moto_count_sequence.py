"""A known sequence of SQS calls, for the test that the launcher counts them exactly.

`python moto_count_sequence.py http://127.0.0.1:PORT` makes, on a new queue of the
launcher's moto, through boto3 (the SDK a publisher in `examples/python` uses):

- CreateQueue, then SendMessage of 100 bytes (1 request) and of 200,000 bytes
  (4 chunks of 64 KB);
- ReceiveMessage of both (200,100 bytes: 4 requests), then one of the empty queue (1);
- SendMessageBatch of three 30,000-byte bodies, each with an attribute `k` String `v`
  (8 bytes): 90,024 bytes, 2 requests; ReceiveMessage of the three (2 requests);
- DeleteMessageBatch of the three, ChangeMessageVisibility of one message, then
  DeleteMessage of each of the two; GetQueueAttributes.

`crates/stand-in/tests/servers.rs` reads the counts back and compares them with these.
"""

import sys

import boto3

SMALL, LARGE, BATCH = 100, 200_000, 30_000


def main(endpoint):
    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    url = sqs.create_queue(QueueName="counted", Attributes={"VisibilityTimeout": "600"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="s" * SMALL)
    sqs.send_message(QueueUrl=url, MessageBody="l" * LARGE)
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)["Messages"]
    assert len(first) == 2, first
    empty = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    assert not empty.get("Messages"), empty
    attribute = {"k": {"DataType": "String", "StringValue": "v"}}
    sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": "b" * BATCH, "MessageAttributes": attribute} for i in range(3)],
    )
    batch = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, MessageAttributeNames=["All"]
    )["Messages"]
    assert len(batch) == 3, batch
    sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)],
    )
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"], VisibilityTimeout=30)
    for m in first:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    print("sequence done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
