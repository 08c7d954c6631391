"""The nightly ETL: Spark jobs over what Petrel services export and store (issue 12)."""
