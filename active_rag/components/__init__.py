"""A method's components, each its own small module: triggers ("when", :mod:`.triggers`), query formulators ("what",
:mod:`.queries`), context policies ("what the prompt keeps", :mod:`.context`), the answer stage
(:mod:`.answer_stage`), routers (TA-ARE, :mod:`.routing`), prompts and their layout (:mod:`.prompts`,
:mod:`.prompt_layout`), DRAGIN's profiles and calibrated thresholds (:mod:`.profiles`, :mod:`.thresholds`), the run
settings and flat names (:mod:`.settings`), and the presets that name them (:mod:`.presets`). The engine
(:mod:`active_rag.engine`) puts them together; the answer heuristics they name are in :mod:`active_rag.answer`."""
