"""Env families: the tuned defaults of each (:mod:`.defaults`) and the units a policy sees their
observations in (:mod:`.obs_scale`). How the defaults were chosen: docs/experiments.md."""
