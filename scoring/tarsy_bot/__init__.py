"""tarsy-bot, the Python TARSy (deprecated upstream since February 2026): its session
document and its rendering for the judge."""
