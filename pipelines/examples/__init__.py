"""Example Spark pipelines on tmsgate (README.md beside this file): ``tmsgate pipeline run
NAME`` runs one against a local gateway. Each module has ``main(argv)``."""

EXAMPLES = {
    "generate-orders": "tmsgate.pipelines.examples.generate_orders",
    "order-totals": "tmsgate.pipelines.examples.order_totals",
    "export-parquet": "tmsgate.pipelines.examples.export_parquet",
}
