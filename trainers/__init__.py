"""Lightning trainers that fit pair adapters with receiver-logit losses."""

if __name__ != "heterofold_hub.trainers":  # one module, one name (docs/packaging.md)
    raise ImportError(f"Import heterofold_hub.trainers, not {__name__}: the trainers are part of the heterofold_hub "
                      "package (in a checkout they are served from the repository root's trainers/).")
