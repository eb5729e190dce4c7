//! publish -> SQS -> run-local (ingest in process) -> DynamoDB -> query over HTTP, on a
//! private moto: the table holds exactly the valid readings, the DLQ exactly the
//! malformed messages, and the API reads a device's range back.
