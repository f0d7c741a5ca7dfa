"""hermes-redis inside Hermes Agent (NousResearch/hermes-agent): its memory provider and its
context engine, both faces over ``SessionAPI`` (issue 41)."""
