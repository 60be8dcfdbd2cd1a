"""What operators see: Prometheus metrics and webhook notifications (docs/observability.md).

The decision and the node programs call `observe.hooks` only; the metric families live in
`controller` (from the journal) and `node_ledger` (from each node's ledger), rendered by
`exposition`; `notify` is the webhook sink.
"""
