//! The state graph `#[flow]` built, rendered as a Mermaid `stateDiagram-v2`: states, the
//! asks and sub-flow calls between them, the sends each state makes, and where the flow ends.

use std::fmt::Write;

/// One state's outgoing edges.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(crate) struct StateNode {
    /// `Start`, `S1`, …
    pub(crate) name: String,
    /// (target state, label) for each suspension reachable from this state.
    pub(crate) edges: Vec<(String, String)>,
    /// Whether the flow can end from this state.
    pub(crate) ends: bool,
    /// The send sites of this state's step.
    pub(crate) sends: usize,
}

/// A state's name as a Mermaid id (identities hold `-` and `.`).
fn id(s: &str) -> String {
    s.replace(['-', '.'], "_")
}

fn escape(s: &str) -> String {
    s.replace('"', "'").replace([':', '\n'], " ")
}

/// Renders the graph.
pub(crate) fn mermaid(flow: &str, states: &[StateNode]) -> String {
    let mut out = String::from("stateDiagram-v2\n");
    let _ = writeln!(out, "    %% flow {flow}");
    let _ = writeln!(out, "    [*] --> Start");
    for s in states {
        for (to, label) in &s.edges {
            let _ = writeln!(out, "    {} --> {}: {}", id(&s.name), id(to), escape(label));
        }
        if s.ends {
            let _ = writeln!(out, "    {} --> [*]", id(&s.name));
        }
        if s.sends > 0 {
            let _ = writeln!(
                out,
                "    note right of {}: {} send site(s)",
                id(&s.name),
                s.sends
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders() {
        let g = mermaid(
            "order",
            &[
                StateNode {
                    name: "Start".into(),
                    edges: vec![("S1".into(), "ask \"What?\"".into())],
                    ends: false,
                    sends: 0,
                },
                StateNode {
                    name: "S1".into(),
                    edges: vec![],
                    ends: true,
                    sends: 1,
                },
            ],
        );
        assert_eq!(
            g,
            "stateDiagram-v2\n    %% flow order\n    [*] --> Start\n    Start --> S1: ask 'What?'\n    S1 --> [*]\n    note right of S1: 1 send site(s)\n"
        );
    }
}
