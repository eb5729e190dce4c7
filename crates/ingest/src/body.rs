//! The message body as JSON, read straight into the shapes the parser's rules look at.
//!
//! Nothing here decides whether a body is valid: every value is taken whatever its JSON
//! type, so a wrong type becomes a refusal with its field and rule in `message.rs`, never
//! a serde error. Object members are kept in key order with the last of repeated keys
//! winning, as `serde_json::Map` keeps them, so the first offending member named in a
//! refusal is the same one it names when the body is read as a `serde_json::Value`.
//! Strings are borrowed from the body unless they hold escapes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON scalar, or the kind of a compound value (whose contents the rules never read).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool,
    Str(Cow<'a, str>),
    /// An integer that fits an `i64`.
    Int(i64),
    /// An integer above `i64::MAX`.
    BigUint(u64),
    Float(f64),
    Array,
    Object,
}

impl Scalar<'_> {
    /// The number as an `f64`, as `serde_json::Value::as_f64` gives it.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match *self {
            Scalar::Int(i) => Some(i as f64),
            Scalar::BigUint(u) => Some(u as f64),
            Scalar::Float(f) => Some(f),
            _ => None,
        }
    }
}

/// A member that holds an object of scalars (`metrics`, `tags`), or something else.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Members<'a> {
    Object(BTreeMap<Cow<'a, str>, Scalar<'a>>),
    Other(Scalar<'a>),
}

/// The members of one reading object; `unknown` is its first unknown key in key order.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct RawReading<'a> {
    pub device_id: Option<Scalar<'a>>,
    pub event_id: Option<Scalar<'a>>,
    pub ts: Option<Scalar<'a>>,
    pub metrics: Option<Members<'a>>,
    pub tags: Option<Members<'a>>,
    pub unknown: Option<Cow<'a, str>>,
}

/// One element of a batch's `readings` array.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Element<'a> {
    Reading(RawReading<'a>),
    NotObject,
}

/// The `readings` member of a body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Readings<'a> {
    Array(Vec<Element<'a>>),
    Other,
}

/// A whole body: an object (one reading, or a batch when `readings` is present, with
/// `other` its first other key in key order), or not an object at all.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per message body, on the stack; boxing would allocate per body"
)]
pub(crate) enum RawBody<'a> {
    Object {
        reading: RawReading<'a>,
        readings: Option<Readings<'a>>,
        other: Option<Cow<'a, str>>,
    },
    NotObject,
}

/// Reads `body`; the error is `serde_json`'s (the body is not JSON).
pub(crate) fn read(body: &str) -> Result<RawBody<'_>, serde_json::Error> {
    serde_json::from_str(body)
}

/// Keeps the smaller of two keys: the first in key order.
fn first_key<'a>(slot: &mut Option<Cow<'a, str>>, key: Cow<'a, str>) {
    if slot.as_ref().is_none_or(|k| key < *k) {
        *slot = Some(key);
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool)
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(i64::try_from(v).map_or(Scalar::BigUint(v), Scalar::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Scalar::Float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Object)
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

/// An object key, borrowed when it holds no escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = BTreeMap::new();
                while let Some((Key(name), value)) = map.next_entry::<Key<'de>, Scalar<'de>>()? {
                    members.insert(name, value);
                }
                Ok(Members::Object(members))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                ScalarVisitor.visit_seq(seq).map(Members::Other)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Members::Other(Scalar::Null))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Members::Other(Scalar::Bool))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Members::Other(Scalar::Int(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Members::Other(
                    i64::try_from(v).map_or(Scalar::BigUint(v), Scalar::Int),
                ))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Members::Other(Scalar::Float(v)))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Members::Other(Scalar::Str(Cow::Borrowed(""))))
            }
        }
        d.deserialize_any(MembersVisitor)
    }
}

/// Reads one reading object's members into `reading`; `batch_key` says whether a
/// `readings` key is the batch (top level) or an unknown member (inside a batch).
struct ReadingMembers<'r, 'a> {
    reading: &'r mut RawReading<'a>,
    readings: Option<&'r mut Option<Readings<'a>>>,
    other: &'r mut Option<Cow<'a, str>>,
}

impl<'de> ReadingMembers<'_, 'de> {
    fn visit<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ReadingMembers {
            reading,
            mut readings,
            other,
        } = self;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "device_id" => reading.device_id = Some(map.next_value()?),
                "event_id" => reading.event_id = Some(map.next_value()?),
                "ts" => reading.ts = Some(map.next_value()?),
                "metrics" => reading.metrics = Some(map.next_value()?),
                "tags" => reading.tags = Some(map.next_value()?),
                "readings" if readings.is_some() => {
                    if let Some(slot) = readings.as_deref_mut() {
                        *slot = Some(map.next_value()?);
                    }
                    continue;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    first_key(&mut reading.unknown, key.clone());
                }
            }
            // Every key but `readings` is "another key" of a batch.
            first_key(other, key);
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Readings<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ReadingsVisitor;
        impl<'de> Visitor<'de> for ReadingsVisitor {
            type Value = Readings<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(element) = seq.next_element::<Element<'de>>()? {
                    list.push(element);
                }
                Ok(Readings::Array(list))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                ScalarVisitor.visit_map(map).map(|_| Readings::Other)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Readings::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Readings::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Readings::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Readings::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Readings::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Readings::Other)
            }
        }
        d.deserialize_any(ReadingsVisitor)
    }
}

impl<'de> Deserialize<'de> for Element<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ElementVisitor;
        impl<'de> Visitor<'de> for ElementVisitor {
            type Value = Element<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let mut reading = RawReading::default();
                let mut other = None;
                ReadingMembers {
                    reading: &mut reading,
                    readings: None,
                    other: &mut other,
                }
                .visit(map)?;
                Ok(Element::Reading(reading))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                ScalarVisitor.visit_seq(seq).map(|_| Element::NotObject)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Element::NotObject)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Element::NotObject)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Element::NotObject)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Element::NotObject)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Element::NotObject)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Element::NotObject)
            }
        }
        d.deserialize_any(ElementVisitor)
    }
}

impl<'de> Deserialize<'de> for RawBody<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BodyVisitor;
        impl<'de> Visitor<'de> for BodyVisitor {
            type Value = RawBody<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let mut reading = RawReading::default();
                let mut readings = None;
                let mut other = None;
                ReadingMembers {
                    reading: &mut reading,
                    readings: Some(&mut readings),
                    other: &mut other,
                }
                .visit(map)?;
                Ok(RawBody::Object {
                    reading,
                    readings,
                    other,
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                ScalarVisitor.visit_seq(seq).map(|_| RawBody::NotObject)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(RawBody::NotObject)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(RawBody::NotObject)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(RawBody::NotObject)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(RawBody::NotObject)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(RawBody::NotObject)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(RawBody::NotObject)
            }
        }
        d.deserialize_any(BodyVisitor)
    }
}
