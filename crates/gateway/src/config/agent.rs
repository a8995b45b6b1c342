//! Agent profiles and agent routes in the config (`[[agent]]`, `[[agent_route]]`): an agent
//! CLI run headless, how its session is resumed, and a D1 policy per class; routes list
//! profiles as candidates, as model routes list candidates.

use std::collections::BTreeMap;
use std::sync::Arc;

use rebound_core::Policy;
use serde::Deserialize;

use super::policy::{PolicyFile, compile_policy};

/// The placeholders an argument may hold.
const PLACEHOLDERS: [&str; 2] = ["{prompt}", "{session}"];

/// What the resume of a Claude Code or Codex session says, unless a profile says otherwise.
pub const DEFAULT_RESUME_PROMPT: &str =
    "Continue the task where you stopped. Do not repeat work that is already done.";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentFile {
    id: String,
    /// The program.
    command: String,
    /// Its arguments for a new session; `{prompt}` is replaced by the run's prompt.
    args: Vec<String>,
    /// Its arguments to resume a session: `{session}` is the id the CLI reported, `{prompt}`
    /// the resume prompt. Without them, a session is never resumed.
    resume_args: Option<Vec<String>>,
    /// What a resumed session is told.
    resume_prompt: Option<String>,
    /// Extra environment.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The working directory when a run names none.
    cwd: Option<String>,
    /// The CLI's structured output: `claude-stream-json`, `codex-json` or `text`.
    output: String,
    /// The provider name rules see (`claude-code`, `codex`); the output format's by default.
    provider: Option<String>,
    #[serde(default)]
    policy: PolicyFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentRouteFile {
    id: String,
    /// Profile ids, in order.
    agents: Vec<String>,
    /// A run that already acted may go to the next profile as a fresh session (D4 allows it
    /// only when the route says so).
    #[serde(default)]
    handoff: bool,
}

/// How an agent CLI reports its session, its effects and its errors on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentOutput {
    /// Claude Code `-p --output-format stream-json --verbose`: one JSON event per line.
    ClaudeStreamJson,
    /// Codex `exec --json`: one JSON event per line.
    CodexJson,
    /// Plain text: no session, no effects seen; errors from the text alone.
    Text,
}

impl AgentOutput {
    fn parse(name: &str) -> Option<AgentOutput> {
        match name {
            "claude-stream-json" => Some(AgentOutput::ClaudeStreamJson),
            "codex-json" => Some(AgentOutput::CodexJson),
            "text" => Some(AgentOutput::Text),
            _ => None,
        }
    }

    fn provider(self) -> &'static str {
        match self {
            AgentOutput::ClaudeStreamJson => "claude-code",
            AgentOutput::CodexJson => "codex",
            AgentOutput::Text => "agent",
        }
    }
}

/// One agent profile, validated.
#[derive(Clone, Debug)]
pub struct AgentProfile {
    /// Its id.
    pub id: String,
    /// The program.
    pub command: String,
    /// Arguments of a new session, with `{prompt}`.
    pub args: Vec<String>,
    /// Arguments of a resumed session, with `{session}` (and maybe `{prompt}`).
    pub resume_args: Option<Vec<String>>,
    /// What a resumed session is told.
    pub resume_prompt: String,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// The default working directory.
    pub cwd: Option<String>,
    /// Its output format.
    pub output: AgentOutput,
    /// The provider name its evidence carries.
    pub provider: String,
    /// Its policy per class (D1).
    pub policy: Arc<Policy>,
}

/// The arguments of one invocation.
fn fill(args: &[String], prompt: &str, session: &str) -> Vec<String> {
    args.iter()
        .map(|a| a.replace("{session}", session).replace("{prompt}", prompt))
        .collect()
}

impl AgentProfile {
    /// The arguments that start a new session with `prompt`.
    pub fn fresh_args(&self, prompt: &str) -> Vec<String> {
        fill(&self.args, prompt, "")
    }

    /// The arguments that resume `session`; `None` when the profile cannot resume.
    pub fn resume_args(&self, session: &str) -> Option<Vec<String>> {
        let args = self.resume_args.as_ref()?;
        Some(fill(args, &self.resume_prompt, session))
    }
}

/// An agent route, validated.
#[derive(Clone, Debug)]
pub struct AgentRoute {
    /// Its id.
    pub id: String,
    /// Its profiles, in order.
    pub agents: Vec<Arc<AgentProfile>>,
    /// Whether a run that acted may be handed to the next profile.
    pub handoff: bool,
}

/// Every agent profile and route.
#[derive(Clone, Debug, Default)]
pub struct Agents {
    /// Profiles by id.
    pub profiles: BTreeMap<String, Arc<AgentProfile>>,
    /// Routes, in order.
    pub routes: Vec<Arc<AgentRoute>>,
}

impl Agents {
    /// The route `id`.
    pub fn route(&self, id: &str) -> Option<&Arc<AgentRoute>> {
        self.routes.iter().find(|r| r.id == id)
    }

    /// The profile `id`.
    pub fn profile(&self, id: &str) -> Option<&Arc<AgentProfile>> {
        self.profiles.get(id)
    }

    /// The values of profile environment variables whose names say they hold a credential
    /// (`…KEY…`, `…TOKEN…`, `…SECRET…`, `…PASSWORD…`): redacted wherever text leaves.
    pub fn secrets(&self) -> impl Iterator<Item = String> + '_ {
        self.profiles.values().flat_map(|p| {
            p.env
                .iter()
                .filter(|(name, value)| {
                    let name = name.to_ascii_uppercase();
                    !value.is_empty()
                        && ["KEY", "TOKEN", "SECRET", "PASSWORD"]
                            .iter()
                            .any(|word| name.contains(word))
                })
                .map(|(_, value)| value.clone())
        })
    }
}

/// An error at a dotted key.
type Failure = (String, String);

fn check_args(args: &[String], at: &str, needs: &str) -> Result<(), Failure> {
    for (i, arg) in args.iter().enumerate() {
        let mut rest = arg.as_str();
        while let Some(start) = rest.find('{') {
            let tail = &rest[start..];
            let end = tail.find('}').map_or(tail.len(), |e| e + 1);
            let placeholder = &tail[..end];
            if !PLACEHOLDERS.contains(&placeholder) {
                return Err((
                    format!("{at}[{i}]"),
                    format!(
                        "unknown placeholder `{placeholder}`, expected {{prompt}} or {{session}}"
                    ),
                ));
            }
            rest = &tail[end..];
        }
    }
    if !args.iter().any(|a| a.contains(needs)) {
        return Err((at.to_owned(), format!("no argument holds `{needs}`")));
    }
    Ok(())
}

fn compile_profile<'c>(
    a: &AgentFile,
    default_policy: &Policy,
    catalogue: &dyn Fn() -> Result<&'c rebound_core::Catalogue, String>,
) -> Result<AgentProfile, Failure> {
    let at = |field: &str| format!("agent.{}.{field}", a.id);
    if a.id.trim().is_empty() {
        return Err(("agent.id".into(), "is empty".into()));
    }
    if a.command.trim().is_empty() {
        return Err((at("command"), "is empty".into()));
    }
    let output = AgentOutput::parse(&a.output).ok_or_else(|| {
        (
            at("output"),
            format!(
                "unknown output `{}`, expected claude-stream-json, codex-json or text",
                a.output
            ),
        )
    })?;
    check_args(&a.args, &at("args"), "{prompt}")?;
    if a.args.iter().any(|arg| arg.contains("{session}")) {
        return Err((at("args"), "a new session has no `{session}`".into()));
    }
    if let Some(resume) = &a.resume_args {
        check_args(resume, &at("resume_args"), "{session}")?;
        if output == AgentOutput::Text {
            return Err((
                at("resume_args"),
                "a `text` output reports no session to resume".into(),
            ));
        }
    }
    let policy = compile_policy(&a.policy, default_policy, &at("policy"), catalogue)?;
    Ok(AgentProfile {
        id: a.id.clone(),
        command: a.command.clone(),
        args: a.args.clone(),
        resume_args: a.resume_args.clone(),
        resume_prompt: a
            .resume_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_RESUME_PROMPT.to_owned()),
        env: a.env.clone(),
        cwd: a.cwd.clone(),
        output,
        provider: a
            .provider
            .clone()
            .unwrap_or_else(|| output.provider().to_owned()),
        policy: Arc::new(policy),
    })
}

/// Compiles `[[agent]]` and `[[agent_route]]`.
pub(super) fn compile_agents<'c>(
    agents: &[AgentFile],
    routes: &[AgentRouteFile],
    default_policy: &Policy,
    catalogue: &dyn Fn() -> Result<&'c rebound_core::Catalogue, String>,
) -> Result<Agents, Failure> {
    let mut out = Agents::default();
    for a in agents {
        let profile = compile_profile(a, default_policy, catalogue)?;
        if out
            .profiles
            .insert(a.id.clone(), Arc::new(profile))
            .is_some()
        {
            return Err((format!("agent.{}.id", a.id), "declared twice".into()));
        }
    }
    for r in routes {
        let at = |field: &str| format!("agent_route.{}.{field}", r.id);
        if out.routes.iter().any(|known| known.id == r.id) {
            return Err((at("id"), "declared twice".into()));
        }
        if r.agents.is_empty() {
            return Err((at("agents"), "needs at least one agent profile".into()));
        }
        let list = r
            .agents
            .iter()
            .map(|id| {
                out.profiles
                    .get(id)
                    .cloned()
                    .ok_or_else(|| (at("agents"), format!("no agent profile `{id}`")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.routes.push(Arc::new(AgentRoute {
            id: r.id.clone(),
            agents: list,
            handoff: r.handoff,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{ConfigError, Overrides, load};
    use super::*;

    const BASE: &str = r#"
[[candidate]]
id = "openai"
protocol = "openai"
base_url = "http://127.0.0.1:9/v1"

[[route]]
id = "default"
models = ["*"]
candidates = ["openai"]
"#;

    fn load_agents(agents: &str) -> Result<Agents, ConfigError> {
        let text = format!("{BASE}\n{agents}");
        load("rebound.toml", &text, &Overrides::default(), &[("X", "y")]).map(|c| c.agents)
    }

    const CLAUDE_AND_CODEX: &str = r#"
[[agent]]
id = "claude"
command = "claude"
args = ["-p", "{prompt}", "--output-format", "stream-json", "--verbose"]
resume_args = ["-p", "{prompt}", "--resume", "{session}", "--output-format", "stream-json", "--verbose"]
output = "claude-stream-json"
env = { DISABLE_TELEMETRY = "1", ANTHROPIC_API_KEY = "sk-ant-profile-secret-0123456789" }
policy = { hard = { reset_wait_max_ms = 18000000, exhausted = "skip" } }

[[agent]]
id = "codex"
command = "codex"
args = ["exec", "--json", "{prompt}"]
resume_args = ["exec", "resume", "--json", "{session}", "{prompt}"]
output = "codex-json"

[[agent_route]]
id = "agents"
agents = ["claude", "codex"]
"#;

    #[test]
    fn profiles_and_routes_load_with_their_templates_and_policies() {
        let agents = load_agents(CLAUDE_AND_CODEX).unwrap();
        let route = agents.route("agents").unwrap();
        assert_eq!(route.agents.len(), 2);
        assert!(!route.handoff);
        let claude = &route.agents[0];
        assert_eq!(claude.output, AgentOutput::ClaudeStreamJson);
        assert_eq!(claude.provider, "claude-code");
        assert_eq!(claude.fresh_args("hi")[1], "hi");
        let resume = claude.resume_args("abc").unwrap();
        assert_eq!(resume[1], DEFAULT_RESUME_PROMPT);
        assert_eq!(resume[3], "abc");
        let wait = claude.policy.hard.reset_wait.unwrap();
        assert_eq!(wait.max, Duration::from_secs(18_000));
        assert_eq!(agents.profile("codex").unwrap().provider, "codex");
        let secrets: Vec<String> = agents.secrets().collect();
        assert_eq!(secrets, vec!["sk-ant-profile-secret-0123456789".to_owned()]);
    }

    #[test]
    fn bad_profiles_are_named_by_their_key() {
        let cases = [
            (
                r#"[[agent]]
id = "a"
command = "x"
args = ["{promt}"]
output = "text""#,
                "agent.a.args[0]",
                "unknown placeholder `{promt}`",
            ),
            (
                r#"[[agent]]
id = "a"
command = "x"
args = ["-p"]
output = "text""#,
                "agent.a.args",
                "no argument holds `{prompt}`",
            ),
            (
                r#"[[agent]]
id = "a"
command = "x"
args = ["{prompt}"]
resume_args = ["--resume"]
output = "codex-json""#,
                "agent.a.resume_args",
                "no argument holds `{session}`",
            ),
            (
                r#"[[agent]]
id = "a"
command = "x"
args = ["{prompt}"]
output = "json""#,
                "agent.a.output",
                "unknown output `json`",
            ),
            (
                r#"[[agent]]
id = "a"
command = "x"
args = ["{prompt}"]
output = "text"
[[agent_route]]
id = "r"
agents = ["a", "b"]"#,
                "agent_route.r.agents",
                "no agent profile `b`",
            ),
        ];
        for (text, key, message) in cases {
            let err = load_agents(text).unwrap_err();
            assert_eq!(err.key.as_deref(), Some(key), "{err}");
            assert!(err.message.contains(message), "{err}");
        }
    }
}
