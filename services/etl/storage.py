"""Asking Hadoop's FileSystem about a URI (file://, hdfs://, s3a://) the way the executors would see it."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


def exists(spark: SparkSession, uri: str) -> bool:
    filesystem, path = _filesystem(spark, uri)
    return bool(filesystem.exists(path))


def delete(spark: SparkSession, uri: str) -> None:
    """Delete a directory and all under it, if it is there."""
    filesystem, path = _filesystem(spark, uri)
    if filesystem.exists(path):
        filesystem.delete(path, True)


def list_folders(spark: SparkSession, uri: str) -> list[str]:
    """The names of the folders in a folder, sorted."""
    filesystem, path = _filesystem(spark, uri)
    return sorted(str(status.getPath().getName()) for status in filesystem.listStatus(path) if status.isDirectory())


def write_bytes(spark: SparkSession, uri: str, data: bytes) -> None:
    """Create (or replace) a file with these bytes, its folders made as needed."""
    filesystem, path = _filesystem(spark, uri)
    stream = filesystem.create(path, True)
    try:
        stream.write(bytearray(data))  # py4j passes a bytearray as a Java byte[]
    finally:
        stream.close()


def _filesystem(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm  # py4j: Hadoop's FileSystem has no Python API
    if jvm is None:
        raise RuntimeError("the SparkContext has no JVM: it was stopped")
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path
