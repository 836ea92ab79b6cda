//! `dsh approvals list|remove`: the approval rules remembered with "always allow"
//! (`$DSH_HOME/approvals.json`, docs/SECURITY.md, "Approval rules").

use std::process::ExitCode;

use dsh_agent::{approvals_path, read_rules, write_rules};

// Arguments of `dsh approvals` (a plain comment: clap would make a doc comment the
// subcommand's help line, which the variant's doc in main.rs is).
#[derive(Debug, clap::Args)]
pub(crate) struct ApprovalsArgs {
    #[command(subcommand)]
    command: ApprovalsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ApprovalsCommand {
    /// List the remembered rules, numbered.
    List,
    /// Remove rule `<n>` (its number in `dsh approvals list`), or `all` of them.
    Remove {
        /// A rule number, or `all`.
        which: String,
    },
}

fn user_error(message: String) -> anyhow::Error {
    crate::run::user_error("INVALID_ARGS", message)
}

/// Runs `dsh approvals`.
pub(crate) fn run(args: ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let home = crate::home::dsh_home()?;
    let path = approvals_path(&home);
    // `remove all` also clears a damaged file (the way out its error message names).
    let clearing =
        matches!(&args.command, ApprovalsCommand::Remove { which } if which.trim() == "all");
    let rules = match read_rules(&path) {
        Ok(rules) => rules,
        Err(_) if clearing => Vec::new(),
        Err(err) => return Err(user_error(err)),
    };
    match args.command {
        ApprovalsCommand::List => {
            if rules.is_empty() {
                println!(
                    "no remembered approvals ({} has none; answer \"always allow\" to an approval question to add one)",
                    path.display()
                );
            }
            for (i, rule) in rules.iter().enumerate() {
                println!("{:>3}  {}", i + 1, rule.describe());
            }
        }
        ApprovalsCommand::Remove { which } => {
            let kept = if which.trim() == "all" {
                Vec::new()
            } else {
                let n: usize = which.trim().parse().map_err(|_| {
                    user_error(format!(
                        "`{which}` is not a rule number; give the number shown by `dsh approvals list`, or `all`"
                    ))
                })?;
                if n == 0 || n > rules.len() {
                    return Err(user_error(format!(
                        "there is no rule {n}: {} rule(s) are remembered (see `dsh approvals list`)",
                        rules.len()
                    )));
                }
                let mut kept = rules.clone();
                let removed = kept.remove(n - 1);
                println!("removed: {}", removed.describe());
                kept
            };
            if clearing || kept.len() != rules.len() {
                write_rules(&path, &kept).map_err(user_error)?;
            }
            if which.trim() == "all" {
                println!("removed {} rule(s)", rules.len());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
