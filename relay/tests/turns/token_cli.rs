//! `relay token`: prints a hex join token that opens under the key file's key
//! with the requested match, slot, lifetime and relay address.

use lockstep::token::{ConnectToken, MatchInstance, Refusal, TokenKey, TokenKind};
use std::process::{Command, Output};

#[test]
fn relay_token_prints_a_token_for_the_match_and_slot() {
    let dir = std::env::temp_dir().join(format!("relay-token-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("token.key");
    let run = |lifetime: &str, extra: &[&str]| -> Output {
        Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(["token", "--match", "ranked-7", "--slot", "2"])
            .args(["--expires-in", lifetime, "--key-file"])
            .arg(&key_file)
            .args(extra)
            .output()
            .unwrap()
    };
    // A missing key file is an error unless --create-key.
    let out = run("90s", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));

    let out = run("90s", &["--create-key", "--relay", "127.0.0.1:9000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = TokenKey::from_hex(&std::fs::read_to_string(&key_file).unwrap()).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "key file readable by its owner only");
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let token = ConnectToken::from_hex(text.trim()).unwrap();
    let (claims, keys) = token.private.open(&key).unwrap();
    assert_eq!(claims.admits("ranked-7", 2), Ok(()));
    assert_eq!(claims.expire_unix - claims.create_unix, 90);
    assert_eq!(keys, token.keys);
    assert_eq!(token.servers, vec!["127.0.0.1:9000".parse().unwrap()]);

    // The second run reuses the key; JSON output; minutes.
    let out = run("5m", &["--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["match"], "ranked-7");
    assert_eq!(v["slot"], 2);
    let token2 = ConnectToken::from_hex(v["token"].as_str().unwrap()).unwrap();
    let (claims2, _) = token2.private.open(&key).unwrap();
    assert_eq!(claims2.expire_unix - claims2.create_unix, 300);
    assert_ne!(token2.private.nonce, token.private.nonce, "fresh token id");
    assert_eq!(claims.instance, MatchInstance::UNBOUND, "no --instance");

    // --instance is sealed in the token (and echoed in the JSON).
    let inst = "00112233445566778899aabbccddeeff";
    let out = run("5m", &["--json", "--instance", inst]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["instance"], inst);
    let token3 = ConnectToken::from_hex(v["token"].as_str().unwrap()).unwrap();
    let (claims3, _) = token3.private.open(&key).unwrap();
    assert_eq!(claims3.instance, MatchInstance::from_hex(inst).unwrap());
    assert!(!run("5m", &["--instance", "0011"]).status.success());

    // Nonsense lifetimes are refused by the argument parser.
    for bad in ["0s", "10d", "x"] {
        assert!(!run(bad, &[]).status.success(), "{bad}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn relay_token_spectator_prints_a_spectator_token_that_admits_no_slot() {
    let dir = std::env::temp_dir().join(format!("relay-token-spec-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("token.key");
    let run = |extra: &[&str]| -> Output {
        Command::new(env!("CARGO_BIN_EXE_relay"))
            .args(["token", "--match", "ranked-7", "--create-key", "--key-file"])
            .arg(&key_file)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--spectator", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = TokenKey::from_hex(&std::fs::read_to_string(&key_file).unwrap()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "spectator");
    assert_eq!(v["slot"], serde_json::Value::Null);
    let token = ConnectToken::from_hex(v["token"].as_str().unwrap()).unwrap();
    let (claims, _) = token.private.open(&key).unwrap();
    assert_eq!(claims.kind, TokenKind::Spectator);
    assert_eq!(claims.admits_spectator("ranked-7"), Ok(()));
    assert_eq!(claims.admits("ranked-7", 0), Err(Refusal::WrongKind));
    // A player token needs a slot; a slot and --spectator do not go together.
    assert_eq!(run(&[]).status.code(), Some(2));
    assert_eq!(run(&["--spectator", "--slot", "1"]).status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
