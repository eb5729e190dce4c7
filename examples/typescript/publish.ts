/**
 * Publish readings to Shardline's ingest queue with the AWS SDK for JavaScript v3.
 *
 * Readings go in the documented message format, `{"readings": [...]}` with up to 500
 * readings per message, ten messages per SendMessageBatch call. Entries SQS refuses for
 * a reason of its own are sent again with back-off; entries refused as the sender's
 * fault are reported.
 *
 *   npm ci && npm start -- --queue-url "$QUEUE_URL" --device sensor-alpha-001 --count 100
 *
 * Credentials and region come from the SDK's usual sources; AWS_ENDPOINT_URL points at
 * a local stand-in.
 */
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import {
  SQSClient,
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
} from "@aws-sdk/client-sqs";

/** One reading, as the ingest accepts it. */
export interface Reading {
  device_id: string;
  event_id: string;
  /** RFC 3339 or epoch milliseconds. */
  ts: string;
  metrics: Record<string, number>;
  tags?: Record<string, string>;
}

/** Most readings one message may carry. */
export const MAX_READINGS_PER_MESSAGE = 500;
/** Most messages one SendMessageBatch call may carry. */
export const MAX_BATCH = 10;
/** Most bytes of one message. */
export const MAX_MESSAGE_BYTES = 256 * 1024;

/** Message bodies of up to `perMessage` readings, each within SQS's size limit. */
export function messages(readings: Reading[], perMessage: number): string[] {
  const bodies: string[] = [];
  let chunk: Reading[] = [];
  const body = (rs: Reading[]) => JSON.stringify({ readings: rs });
  for (const reading of readings) {
    const candidate = [...chunk, reading];
    const tooBig = Buffer.byteLength(body(candidate)) > MAX_MESSAGE_BYTES;
    if (chunk.length > 0 && (candidate.length > perMessage || tooBig)) {
      bodies.push(body(chunk));
      chunk = [reading];
    } else {
      chunk = candidate;
    }
  }
  if (chunk.length > 0) bodies.push(body(chunk));
  return bodies;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Sends every body with SendMessageBatch; resolves to how many could not be sent. */
export async function sendAll(
  sqs: SQSClient,
  queueUrl: string,
  bodies: string[],
  attempts = 5,
): Promise<number> {
  let failed = 0;
  for (let first = 0; first < bodies.length; first += MAX_BATCH) {
    const pending = new Map<string, string>(
      bodies.slice(first, first + MAX_BATCH).map((b, i) => [String(i), b]),
    );
    for (let attempt = 0; attempt < attempts && pending.size > 0; attempt++) {
      if (attempt > 0) await sleep(Math.min(2000, 100 * 2 ** attempt));
      const entries: SendMessageBatchRequestEntry[] = [...pending].map(([Id, MessageBody]) => ({
        Id,
        MessageBody,
      }));
      const answer = await sqs.send(
        new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }),
      );
      for (const ok of answer.Successful ?? []) if (ok.Id) pending.delete(ok.Id);
      for (const refused of answer.Failed ?? []) {
        if (refused.SenderFault && refused.Id) {
          // A bad entry does not get better with a retry.
          console.error(`refused: ${refused.Code}: ${refused.Message}`);
          pending.delete(refused.Id);
          failed += 1;
        }
      }
    }
    failed += pending.size;
  }
  return failed;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      "queue-url": { type: "string" },
      device: { type: "string", default: "sensor-alpha-001" },
      count: { type: "string", default: "100" },
      "every-ms": { type: "string", default: "1000" },
      "per-message": { type: "string", default: "50" },
    },
  });
  const queueUrl = values["queue-url"];
  if (!queueUrl) throw new Error("--queue-url is required");
  const device = values.device ?? "sensor-alpha-001";
  const count = Number(values.count ?? "100");
  const everyMs = Number(values["every-ms"] ?? "1000");
  const perMessage = Number(values["per-message"] ?? "50");
  if (!(perMessage >= 1 && perMessage <= MAX_READINGS_PER_MESSAGE)) {
    throw new Error(`--per-message must be 1 to ${MAX_READINGS_PER_MESSAGE}`);
  }
  const start = Date.now() - count * everyMs;
  const readings: Reading[] = Array.from({ length: count }, (_, i) => {
    const ts = start + i * everyMs;
    return {
      device_id: device,
      event_id: `${ts}-${randomUUID().slice(0, 8)}`,
      ts: new Date(ts).toISOString(),
      metrics: { temperature: 20 + (i % 50) / 10 },
      tags: { source: "typescript-example" },
    };
  });
  const bodies = messages(readings, perMessage);
  const failed = await sendAll(new SQSClient({}), queueUrl, bodies);
  console.error(`sent ${readings.length} readings in ${bodies.length} messages; ${failed} failed`);
  return failed > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(2);
  },
);
