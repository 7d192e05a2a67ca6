"""Pictures of a machine and of a plan (`svg`, `html`, `terminal`, drawing a Topology with an optional
`palette.Overlay`; `plan` makes a bind plan's overlay) and the text forms; each imported when asked for."""
