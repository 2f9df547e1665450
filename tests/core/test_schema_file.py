"""The committed JSON Schema file is the one the code generates (one definition, kept in sync)."""

import json
from pathlib import Path

from lengthlens.data.schema import POLARS_SCHEMA, RunRecord, json_schema

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "data_schema" / "run_record.v1.schema.json"


def test_schema_file_in_sync():
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema()


def test_polars_schema_follows_record():
    assert list(POLARS_SCHEMA.names()) == list(RunRecord.model_fields)
