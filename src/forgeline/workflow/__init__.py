"""The DAG's side of the package: helpers the Snakefile uses, dvc.yaml export, run timings."""
