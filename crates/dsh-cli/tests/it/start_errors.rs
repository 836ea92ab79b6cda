//! Refused starts, table-driven: each row is a `dsh` invocation that must stop before doing
//! anything, exit 1, print nothing on stdout, and say on stderr what is wrong (the code and the
//! variable, key, flag or setting to fix).

use crate::common::{dsh_command, output, text};

struct Case {
    /// What the row checks, shown when it fails.
    name: &'static str,
    /// The user's `$DSH_HOME/config.toml`, if any.
    user_config: Option<&'static str>,
    /// Extra environment variables.
    env: &'static [(&'static str, &'static str)],
    args: &'static [&'static str],
    /// How stderr must start.
    prefix: &'static str,
    /// Texts stderr must contain.
    needles: &'static [&'static str],
}

const MISTYPED_KEY: &str = "[providers.deepseek]\nbase_ulr = \"http://x\"\n";
const INVALID_CONFIG_NEEDLES: &[&str] = &[
    "config.toml",
    "`providers.deepseek.base_ulr`",
    "fix: did you mean `base_url`",
];

const CASES: &[Case] = &[
    Case {
        name: "no key for the default provider",
        user_config: None,
        env: &[],
        args: &["run", "hi"],
        prefix: "dsh: MISSING_CREDENTIAL:",
        needles: &["DEEPSEEK_API_KEY"],
    },
    Case {
        name: "no key for a provider the user defined with a key variable",
        user_config: Some(
            "[providers.lab]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             api_key_env = \"LAB_KEY\"\ndefault_model = \"m\"\n",
        ),
        env: &[],
        args: &["run", "--provider", "lab", "hi"],
        prefix: "dsh: MISSING_CREDENTIAL:",
        needles: &["LAB_KEY", "remove `api_key_env` from [providers.lab]"],
    },
    Case {
        name: "no key for a chosen provider",
        user_config: None,
        env: &[],
        args: &[
            "run",
            "--provider",
            "anthropic",
            "--model",
            "claude-x",
            "hi",
        ],
        prefix: "dsh: MISSING_CREDENTIAL:",
        needles: &["ANTHROPIC_API_KEY"],
    },
    Case {
        name: "an effort for a model the table does not know",
        user_config: None,
        env: &[("DEEPSEEK_BASE_URL", "http://127.0.0.1:9")],
        args: &["run", "--model", "deepseek-v9", "--effort", "high", "hi"],
        prefix: "dsh: UNSUPPORTED_REASONING_EFFORT:",
        needles: &[
            "deepseek-v9 is not in the model table",
            "dsh models",
            "[models.\"deepseek-v9\"]",
        ],
    },
    Case {
        name: "an unknown provider",
        user_config: None,
        env: &[],
        args: &["run", "--provider", "nope", "hi"],
        prefix: "dsh: ",
        needles: &["flag --provider", "unknown provider `nope`"],
    },
    Case {
        name: "a mistyped config key, config show",
        user_config: Some(MISTYPED_KEY),
        env: &[("DEEPSEEK_API_KEY", "sk-start-errors")],
        args: &["config", "show"],
        prefix: "dsh: INVALID_CONFIG:",
        needles: INVALID_CONFIG_NEEDLES,
    },
    Case {
        name: "a mistyped config key, run",
        user_config: Some(MISTYPED_KEY),
        env: &[("DEEPSEEK_API_KEY", "sk-start-errors")],
        args: &["run", "hi"],
        prefix: "dsh: INVALID_CONFIG:",
        needles: INVALID_CONFIG_NEEDLES,
    },
    Case {
        name: "web on a non-loopback host",
        user_config: None,
        env: &[],
        args: &["web", "--host", "0.0.0.0", "--port", "0", "--no-open"],
        prefix: "dsh: ",
        needles: &["--allow-remote"],
    },
];

#[tokio::test]
async fn refused_starts_exit_one_and_name_what_to_fix() {
    let mut failures = Vec::new();
    for case in CASES {
        let home = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        std::fs::create_dir(cwd.path().join(".git")).unwrap();
        if let Some(config) = case.user_config {
            std::fs::write(home.path().join("config.toml"), config).unwrap();
        }
        let mut cmd = dsh_command(home.path(), cwd.path());
        cmd.envs(case.env.iter().copied()).args(case.args);
        let out = output(cmd).await;
        let (stdout, stderr) = text(&out);
        let ok = out.status.code() == Some(1)
            && stdout.is_empty()
            && stderr.starts_with(case.prefix)
            && case.needles.iter().all(|n| stderr.contains(n));
        if !ok {
            failures.push(format!(
                "{}: exit {:?}, stdout {stdout:?}, stderr {stderr:?}; expected exit 1, no stdout, \
                 stderr starting {:?} and containing {:?}",
                case.name,
                out.status.code(),
                case.prefix,
                case.needles
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A session that does not exist is one clear line and exit 1, every time: `dsh run --resume`
/// with an unknown id and `--continue` in a folder without sessions used to panic now and then
/// ("A Tokio 1.x context was found, but it is being shutdown": the provider connection had
/// been started before the lookup failed) and printed the error twice on one line (issue 41).
#[tokio::test]
async fn an_unknown_session_is_one_line_and_exit_one_every_time() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &["run", "--resume", "zzzz", "x"][..],
            "dsh: NOT_FOUND: no session `zzzz` found",
        ),
        (
            &["run", "--continue", "x"][..],
            "dsh: NOT_FOUND: no session to continue",
        ),
    ] {
        for _ in 0..50 {
            let mut cmd = dsh_command(home.path(), cwd.path());
            cmd.env("DEEPSEEK_API_KEY", "sk-test")
                .env("DEEPSEEK_BASE_URL", "http://127.0.0.1:9")
                .args(args);
            let out = output(cmd).await;
            let (stdout, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(stdout.is_empty(), "{args:?}: {stdout}");
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            assert!(stderr.starts_with(says), "{args:?}: {stderr}");
            assert_eq!(stderr.matches(says).count(), 1, "{args:?}: {stderr}");
        }
    }
}
