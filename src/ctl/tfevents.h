// TensorBoard event files, written without TensorFlow: a TFRecord file of
// serialized Event protobufs (tensorflow/core/util/event.proto). Each record is
// uint64 length (LE), uint32 masked CRC-32C of the length, the data, uint32
// masked CRC-32C of the data. Only the fields pail writes are encoded:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value { string tag = 1; float simple_value = 2; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; DataClass data_class = 4; }  PluginData { string plugin_name = 1; }
//   TensorProto { DataType dtype = 1; TensorShapeProto tensor_shape = 2; repeated bytes string_val = 8; }
//   TensorShapeProto { repeated Dim dim = 2; }   Dim { int64 size = 1; }
// (tensorflow/core/framework/{summary,tensor,tensor_shape}.proto; DT_STRING = 7,
// DATA_CLASS_TENSOR = 2, as tensorboard/plugins/text/summary_v2.py writes them).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"

// CRC-32C (Castagnoli, reflected 0x82F63B78); "123456789" -> 0xE3069283.
uint32_t tfevents_crc32c(const void *data, size_t len);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t tfevents_masked_crc(const void *data, size_t len);

// One Event being built: tfevents_event_begin, then tfevents_event_scalar per
// value, then tfevents_record appends it framed to out. Tags of 1..512 bytes.
typedef struct {
    Buf summary;  // the encoded Summary's Value fields
    double wall_time;
    int64_t step;
    int nvalues;
} TfEvent;
void tfevents_event_begin(TfEvent *e, double wall_time, int64_t step);
int tfevents_event_scalar(TfEvent *e, const char *tag, float value, PailErr *err);
// A text value (TensorBoard's text plugin): a DT_STRING tensor of shape
// (rows, cols), cells row-major, each any bytes (the plugin renders a rank-2
// tensor as a table, each cell as markdown). rows, cols >= 1.
int tfevents_event_text_table(TfEvent *e, const char *tag, const char *const *cells, int rows, int cols,
                              PailErr *err);
void tfevents_event_free(TfEvent *e);
// Appends the framed record of e (with its summary) to out.
int tfevents_record(Buf *out, const TfEvent *e, PailErr *err);
// Appends the file's first record: Event { wall_time, file_version "brain.Event:2" }.
int tfevents_record_version(Buf *out, double wall_time, PailErr *err);
