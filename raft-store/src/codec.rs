//! How values are encoded where JSON's cost showed: the store's values
//! and the Raft messages between nodes.
//!
//! MessagePack with field names: structs are maps keyed by field name and
//! enum variants are named, so a value written by one version reads in
//! another that adds a defaulted field or stops writing one, as with JSON
//! (a positional encoding would misread both). Against JSON it saves the
//! escaping of every string (a record's field names are most of its
//! strings) and the formatting of every number: in `write_path_cost`
//! (examples/) JSON encoding was a fifth of a node's storage work.
//!
//! Types are encoded in their human-readable form (`is_human_readable`),
//! the same form JSON gives them, so no type's shape depends on which of
//! the two encodings carries it. Floats are stored as IEEE 754 doubles and
//! read back bit for bit.

use std::io::Cursor;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// An encoding of Raft payloads: JSON or MessagePack ([`to_vec`]). The
/// store's values are MessagePack only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    MessagePack,
}

impl Encoding {
    /// Encodes `value` in this encoding.
    pub fn encode<T: Serialize + ?Sized>(self, value: &T) -> Result<Vec<u8>, String> {
        match self {
            Encoding::Json => serde_json::to_vec(value).map_err(|e| e.to_string()),
            Encoding::MessagePack => to_vec(value).map_err(|e| e.to_string()),
        }
    }

    /// Decodes one value that fills `bytes`, written in this encoding.
    pub fn decode<T: DeserializeOwned>(self, bytes: &[u8]) -> Result<T, String> {
        match self {
            Encoding::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
            Encoding::MessagePack => from_slice(bytes).map_err(|e| e.to_string()),
        }
    }
}

/// A value that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("cannot encode as MessagePack: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("not a MessagePack value of the expected shape: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("{trailing} bytes follow the MessagePack value")]
    Trailing { trailing: usize },
}

/// Encodes `value` as MessagePack with field names.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(256);
    let mut serializer = rmp_serde::Serializer::new(&mut out)
        .with_struct_map()
        .with_human_readable();
    value.serialize(&mut serializer)?;
    Ok(out)
}

/// The length of `value`'s encoding, counted without building it.
pub fn encoded_len<T: Serialize + ?Sized>(value: &T) -> Result<usize, CodecError> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let mut serializer = rmp_serde::Serializer::new(&mut count)
        .with_struct_map()
        .with_human_readable();
    value.serialize(&mut serializer)?;
    Ok(count.0)
}

/// Appends a MessagePack array header for `len` elements, so values
/// encoded one by one can be sent as one array.
pub fn write_array_len(out: &mut Vec<u8>, len: u32) {
    match len {
        0..=15 => out.push(0x90 | len as u8),
        16..=0xFFFF => {
            out.push(0xDC);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(0xDD);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
}

/// Decodes one value that fills all of `bytes`, as [`to_vec`] wrote it.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let mut deserializer = rmp_serde::Deserializer::new(Cursor::new(bytes)).with_human_readable();
    let value = T::deserialize(&mut deserializer)?;
    let read = usize::try_from(deserializer.get_ref().position()).unwrap_or(usize::MAX);
    if read < bytes.len() {
        return Err(CodecError::Trailing {
            trailing: bytes.len() - read,
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Kind {
        Plain,
        Sized(u32),
        Shaped { w: u32, h: u32 },
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Old {
        name: String,
        kinds: Vec<Kind>,
        by_id: BTreeMap<u64, String>,
        ratio: f64,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct New {
        name: String,
        kinds: Vec<Kind>,
        by_id: BTreeMap<u64, String>,
        ratio: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        added: Option<u32>,
    }

    fn old() -> Old {
        Old {
            name: "a\"b\\c\n".into(),
            kinds: vec![Kind::Plain, Kind::Sized(3), Kind::Shaped { w: 1, h: 2 }],
            by_id: BTreeMap::from([(7, "x".into()), (u64::MAX, "y".into())]),
            ratio: 0.1 + 0.2,
        }
    }

    #[test]
    fn values_round_trip_exactly() {
        let value = old();
        let bytes = to_vec(&value).expect("enc");
        assert_eq!(encoded_len(&value).expect("len"), bytes.len());
        let back: Old = from_slice(&bytes).expect("dec");
        assert_eq!(back, value);
        assert_eq!(back.ratio.to_bits(), value.ratio.to_bits());
    }

    #[test]
    fn fields_are_named_so_versions_read_each_other() {
        // An older writer, a newer reader: the added field takes its default.
        let new: New = from_slice(&to_vec(&old()).expect("enc")).expect("dec");
        assert_eq!(new.added, None);
        assert_eq!(new.name, old().name);
        // A newer writer, an older reader: the unknown field is skipped.
        let newer = New {
            added: Some(4),
            ..new
        };
        let back: Old = from_slice(&to_vec(&newer).expect("enc")).expect("dec");
        assert_eq!(back, old());
        // The encoding names the field and the variant.
        let bytes = to_vec(&newer).expect("enc");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("added"), "{text}");
        assert!(text.contains("Shaped"), "{text}");
    }

    #[test]
    fn values_encoded_one_by_one_read_as_an_array() {
        for len in [0u32, 1, 15, 16, 300, 70_000] {
            let mut out = Vec::new();
            write_array_len(&mut out, len);
            for n in 0..len {
                out.extend_from_slice(&to_vec(&format!("v{n}")).expect("enc"));
            }
            let back: Vec<String> = from_slice(&out).expect("dec");
            assert_eq!(back.len(), len as usize);
            assert_eq!(
                back.last().cloned(),
                len.checked_sub(1).map(|n| format!("v{n}"))
            );
        }
    }

    #[test]
    fn trailing_bytes_and_wrong_shapes_are_refused() {
        let mut bytes = to_vec(&old()).expect("enc");
        bytes.push(0);
        assert!(matches!(
            from_slice::<Old>(&bytes),
            Err(CodecError::Trailing { trailing: 1 })
        ));
        assert!(matches!(
            from_slice::<Old>(b"{\"name\":1}"),
            Err(CodecError::Decode(_))
        ));
        assert!(from_slice::<Old>(&[]).is_err());
        // Truncated anywhere: an error, never a panic.
        let whole = to_vec(&old()).expect("enc");
        for len in 0..whole.len() {
            assert!(from_slice::<Old>(&whole[..len]).is_err(), "{len} bytes");
        }
    }
}
