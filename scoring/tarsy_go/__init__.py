"""Go TARSy (github.com/codeready-toolchain/tarsy), the TARSy in service: its session
document, its rendering for the judge, and its API client (docs/sync.md)."""
