"""The Spark session of the analysis: local by default, any cluster when asked.

Choices:

- **Master**: the ``master`` argument if given; else the one ``spark-submit`` set (the
  job then runs wherever it was submitted); else ``local[2]``, the machines' two cores.
- **Local sessions stay on the machine and stay quiet**: driver bound to 127.0.0.1, no
  web UI, no console progress bar (the job prints its own progress), JVM logging at
  error level (``log4j2.properties`` beside this file), the workers on this interpreter
  so they import the same pyarrow and pandas.
- **Shuffle partitions**: twice the cores unless the submitter set them: the tables are
  small, and Spark's default of 200 costs a minute of task overhead on two cores.
- **Code shipping**: on a cluster the executors need :mod:`analysis` and :mod:`nodes`
  (frame decoding); they are zipped and added with ``addPyFile``, so the job runs
  unchanged on a cluster that has pyspark, pyarrow, pandas and numpy, without pubsublab
  installed there (``tests/test_spark_cluster.py`` runs it on a standalone cluster). The
  executors run ``$PYSPARK_PYTHON`` as set where the driver runs (else ``python3``), so
  set it to an interpreter with the same Python version that exists on the workers.
  Input paths must be visible on every executor under the same name (a shared file
  system), as for any ``file://`` input to Spark.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

LOCAL_MASTER = "local[2]"
_HERE = Path(__file__).resolve().parent
_SHIPPED_PACKAGES = ("analysis", "nodes")


def _ship_code(spark: SparkSession) -> None:
    fd, name = tempfile.mkstemp(prefix="pubsublab-code-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(name, "w") as zf:
        for package in _SHIPPED_PACKAGES:
            for path in sorted((_HERE.parent / package).rglob("*.py")):
                zf.write(path, path.relative_to(_HERE.parent).as_posix())
    spark.sparkContext.addPyFile(name)
    atexit.register(Path(name).unlink, missing_ok=True)  # served to executors until then


def spark_session(master: str | None = None, app_name: str = "pubsublab-analysis"
                  ) -> SparkSession:
    """A session as described in the module docstring."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM
    master = master or (None if submitted else LOCAL_MASTER)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    local = (master or "").startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # PySpark starts its workers with $PYSPARK_PYTHON (not the spark.pyspark.python
        # setting) and falls back to whatever `python3` is first on the PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = (builder
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.extraJavaOptions",
                           f"-Dlog4j2.configurationFile=file:{_HERE / 'log4j2.properties'}"))
    spark = (builder
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             # Partition values (algorithm and host names) stay strings, whatever they look like.
             .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    if not sc.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(2 * sc.defaultParallelism))
    if not sc.master.startswith("local"):
        _ship_code(spark)
    return spark
