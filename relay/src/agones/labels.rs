//! Kubernetes label syntax for `SetLabel`: what the SDK server (and the
//! API server behind it) accepts as a key and a value. Pure.

/// The prefix the SDK server puts before every label and annotation key it
/// is given (`SetLabel("relay-version", ..)` becomes the label
/// `agones.dev/sdk-relay-version`).
pub(super) const SDK_PREFIX: &str = "agones.dev/sdk-";

/// Longest name part of a Kubernetes label key (after the `/`).
const MAX_LABEL_NAME: usize = 63;
/// Longest Kubernetes label value.
const MAX_LABEL_VALUE: usize = 63;

/// Why a label key or value is not one Kubernetes accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum LabelError {
    /// Empty key.
    #[error("a label key cannot be empty")]
    EmptyKey,
    /// Too long (with the SDK's prefix).
    #[error("label {what} {text:?} is longer than {max} characters")]
    TooLong {
        /// `key` or `value`.
        what: &'static str,
        /// The text.
        text: String,
        /// The limit.
        max: usize,
    },
    /// A character outside `[-A-Za-z0-9_.]`, or a first or last character
    /// that is not alphanumeric.
    #[error(
        "label {what} {text:?} must be alphanumeric, '-', '_' or '.', and begin and end alphanumeric"
    )]
    Syntax {
        /// `key` or `value`.
        what: &'static str,
        /// The text.
        text: String,
    },
}

/// Whether `s` has Kubernetes name syntax: `[-A-Za-z0-9_.]` with an
/// alphanumeric first and last character (empty passes).
fn name_syntax(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    b.iter().all(inner)
        && b.first().is_none_or(u8::is_ascii_alphanumeric)
        && b.last().is_none_or(u8::is_ascii_alphanumeric)
}

/// Checks a key given to `SetLabel`: the label's name part becomes
/// `sdk-` + key, which must be a Kubernetes name of at most 63 characters.
pub(super) fn check_label_key(key: &str) -> Result<(), LabelError> {
    let name = format!("{}{key}", &SDK_PREFIX["agones.dev/".len()..]);
    if key.is_empty() {
        Err(LabelError::EmptyKey)
    } else if name.len() > MAX_LABEL_NAME {
        Err(LabelError::TooLong {
            what: "key",
            text: key.to_owned(),
            max: MAX_LABEL_NAME - (name.len() - key.len()),
        })
    } else if !name_syntax(&name) {
        Err(LabelError::Syntax {
            what: "key",
            text: key.to_owned(),
        })
    } else {
        Ok(())
    }
}

/// Checks a label value: at most 63 characters of name syntax (empty is a
/// valid value).
pub(super) fn check_label_value(value: &str) -> Result<(), LabelError> {
    if value.len() > MAX_LABEL_VALUE {
        Err(LabelError::TooLong {
            what: "value",
            text: value.to_owned(),
            max: MAX_LABEL_VALUE,
        })
    } else if !name_syntax(value) {
        Err(LabelError::Syntax {
            what: "value",
            text: value.to_owned(),
        })
    } else {
        Ok(())
    }
}

/// `text` made into a valid label value: characters outside the syntax
/// become `_`, the ends are trimmed to alphanumerics, and it is cut to 63
/// (`0.1.0+build.7` becomes `0.1.0_build.7`).
pub(super) fn label_value_from(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_LABEL_VALUE)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values_follow_kubernetes_syntax() {
        assert_eq!(check_label_key("relay-version"), Ok(()));
        assert_eq!(check_label_key("resumes"), Ok(()));
        assert_eq!(check_label_key("-leading.dash"), Ok(()), "after `sdk-`");
        assert_eq!(check_label_key(&"k".repeat(59)), Ok(()));
        assert!(matches!(
            check_label_key(&"k".repeat(60)),
            Err(LabelError::TooLong { max: 59, .. })
        ));
        assert_eq!(check_label_key(""), Err(LabelError::EmptyKey));
        for bad in ["a/b", "trailing-", "sp ace", "é"] {
            assert!(
                matches!(check_label_key(bad), Err(LabelError::Syntax { .. })),
                "{bad}"
            );
        }
        for good in ["", "0.1.0", "true", "a_b-c.d", &"v".repeat(63)] {
            assert_eq!(check_label_value(good), Ok(()), "{good}");
        }
        for bad in ["-x", "x.", "0.1.0+build", &"v".repeat(64)] {
            assert!(check_label_value(bad).is_err(), "{bad}");
        }
        assert_eq!(label_value_from("0.1.0+build.7"), "0.1.0_build.7");
        assert_eq!(label_value_from("+v1-"), "v1");
        assert_eq!(
            check_label_value(&label_value_from(&"é".repeat(100))),
            Ok(())
        );
    }
}
