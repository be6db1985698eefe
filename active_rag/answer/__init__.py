"""The answer heuristics beyond the papers that the components name: a choice question's options (:mod:`.options`),
comparisons settled by the dates and versions the reader wrote (:mod:`.dates`, :mod:`.versions`), "both" questions
asked name by name (:mod:`.both_names`), the reading a question's form chooses (:mod:`.read_choice`), the links of
the passages (:mod:`.links`), the check of a finished answer (:mod:`.check`) and answer normalisation
(:mod:`.normalize`)."""
