"""The methods' parts: triggers, query formulators, context policies, routers, the answer checks and options, the
linked look, thresholds and calibration, profiles, prompts and the presets that name the papers' methods.
"""
