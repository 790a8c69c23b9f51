"""Lightning trainers that fit pair adapters with receiver-logit losses."""
