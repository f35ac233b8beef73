"""The measured side: the models the probe planner builds (:mod:`.workloads`), a combination's
training step (:mod:`.recipe`), the two-point probe (:mod:`.probe`), one real step read three ways
(:mod:`.verify`), the closed form against the ledger (:mod:`.exactness`) and the technique
waterfall (:mod:`.stack`)."""
