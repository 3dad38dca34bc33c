"""pubsublab: analysis (PySpark jobs, figures, the report)."""

import warnings

# Debian's python3-matplotlib (pulled in by python3-networkx for `mn --custom`) shares the
# mpl_toolkits namespace with the venv's matplotlib; importing pyplot then warns that the
# mismatched Axes3D cannot load. We draw no 3D plots, and the warning on stderr would
# break the one-line error convention of the CLI.
warnings.filterwarnings("ignore", message="Unable to import Axes3D")
