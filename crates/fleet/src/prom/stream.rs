//! A range answer read series by series: each series is handed on as soon as it is parsed,
//! so the client holds one series of an answer at a time, never the whole answer beside
//! what it has merged already (a hundred thousand series' label sets are most of the
//! memory a large fleet's report uses).

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::answer::{Answer, MatrixSeries, Shape};

/// What a streamed answer held, for the debug log.
pub(super) struct Streamed {
    series: usize,
    points: usize,
}

impl Shape for Streamed {
    fn series(&self) -> usize {
        self.series
    }

    fn points(&self) -> usize {
        self.points
    }
}

/// Reads a range answer from `reader`, each series of its matrix handed to `each`.
pub(super) fn matrix(
    reader: &mut dyn std::io::Read,
    each: &mut dyn FnMut(MatrixSeries),
) -> serde_json::Result<Answer<Streamed>> {
    let mut deserializer = serde_json::Deserializer::from_reader(reader);
    let answer = AnswerSeed { each }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(answer)
}

struct AnswerSeed<'f> {
    each: &'f mut dyn FnMut(MatrixSeries),
}

impl<'de> DeserializeSeed<'de> for AnswerSeed<'_> {
    type Value = Answer<Streamed>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AnswerSeed<'_> {
    type Value = Answer<Streamed>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Prometheus API answer")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut answer = Answer {
            status: String::new(),
            data: None,
            error_type: None,
            error: None,
        };
        let each = self.each;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "status" => answer.status = map.next_value()?,
                "errorType" => answer.error_type = map.next_value()?,
                "error" => answer.error = map.next_value()?,
                "data" => answer.data = map.next_value_seed(DataSeed { each: &mut *each })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if answer.status.is_empty() {
            return Err(serde::de::Error::missing_field("status"));
        }
        Ok(answer)
    }
}

/// `{"resultType": "matrix", "result": [...]}`; `null` reads as no data.
struct DataSeed<'f> {
    each: &'f mut dyn FnMut(MatrixSeries),
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = Option<Streamed>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = Option<Streamed>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a range answer's data")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut streamed = None;
        let each = self.each;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "resultType" => {
                    let kind: String = map.next_value()?;
                    if kind != "matrix" {
                        return Err(serde::de::Error::custom(format!(
                            "a {kind} where a range query answers a matrix"
                        )));
                    }
                }
                "result" => streamed = Some(map.next_value_seed(ResultSeed { each: &mut *each })?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        streamed
            .map(Some)
            .ok_or_else(|| serde::de::Error::missing_field("result"))
    }
}

/// The matrix's series, each handed on as it is read.
struct ResultSeed<'f> {
    each: &'f mut dyn FnMut(MatrixSeries),
}

impl<'de> DeserializeSeed<'de> for ResultSeed<'_> {
    type Value = Streamed;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ResultSeed<'_> {
    type Value = Streamed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of series")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut streamed = Streamed {
            series: 0,
            points: 0,
        };
        while let Some(series) = seq.next_element::<MatrixSeries>()? {
            streamed.series += 1;
            streamed.points += series.values.len();
            (self.each)(series);
        }
        Ok(streamed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_handed_on_one_by_one_whatever_the_key_order() {
        let body = r#"{"data":{"result":[{"metric":{"gpu":"0"},"values":[[1,"0.5"],[2,"NaN"]]},{"metric":{"gpu":"1"},"values":[[1,"1"]]}],"resultType":"matrix"},"status":"success"}"#;
        let mut seen = Vec::new();
        let answer = matrix(&mut body.as_bytes(), &mut |s| {
            seen.push(s.metric["gpu"].clone())
        })
        .expect("parses");
        assert_eq!(answer.status, "success");
        assert_eq!(seen, ["0", "1"]);
        let data = answer.data.expect("data");
        assert_eq!((data.series(), data.points()), (2, 3));
        let error = r#"{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}"#;
        let answer = matrix(&mut error.as_bytes(), &mut |_| panic!("no series")).expect("parses");
        assert!(answer.data.is_none() && answer.error.is_some());
        let vector = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert!(matrix(&mut vector.as_bytes(), &mut |_| {}).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        #[test]
        fn any_body_streams_or_fails_cleanly(body in ".{0,300}") {
            let _ = matrix(&mut body.as_bytes(), &mut |_| {});
        }
    }
}
