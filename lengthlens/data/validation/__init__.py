"""Validation of run records: one record's schema and plausibility, the bulk screen of flat tables, cross-record rules."""
