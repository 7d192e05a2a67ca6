"""Pictures of a machine and of a plan, drawn above the model and the planners: `views.svg`,
`views.html` and `views.terminal` draw a Topology (with an optional `views.palette.Overlay`);
`views.plan` makes the overlay of a bind plan. Each module is imported only when its picture is
asked for.
"""
