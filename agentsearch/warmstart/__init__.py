"""The warm start: scripted oracle populations (search, vision) and the one SFT loop."""
