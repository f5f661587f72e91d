// The Training RPC's job specs (server/training_service.h from_proto): each kind's scalar fields are the rows
// of its spec table (core/jobs/job_spec.h), read from the proto by name; inline_rows and config by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/common/config_fields.h"
#include "server/proto_fields.h"
#include "server/training_service.h"

namespace frost::server {
namespace {

// Both ways: every row has a proto field of its name that can carry it, and every scalar proto field is a
// row (the messages and maps, inline_rows and config, are read by hand).
template <class S>
void expect_mapping_complete(const google::protobuf::Descriptor& d, const ConfigTable<S>& table) {
  for (const ConfigField<S>& row : table.fields()) {
    const google::protobuf::FieldDescriptor* fd = d.FindFieldByName(row.name);
    ASSERT_NE(fd, nullptr) << d.full_name() << " has no field " << row.name;
    EXPECT_TRUE(proto_carries(*fd, row.kind)) << d.full_name() << "." << row.name;
  }
  for (int i = 0; i < d.field_count(); ++i) {
    const google::protobuf::FieldDescriptor& fd = *d.field(i);
    if (fd.is_repeated() || fd.cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    EXPECT_NE(table.find(fd.name()), nullptr) << d.full_name() << "." << fd.name() << " is read by nobody";
  }
}

TEST(TrainingSpecTest, EveryJobSpecRowIsAProtoFieldAndEveryProtoScalarARow) {
  expect_mapping_complete(*v1::PrototypeJobSpec::descriptor(), jobs::prototype_spec_table());
  expect_mapping_complete(*v1::KvRepairJobSpec::descriptor(), jobs::kv_repair_spec_table());
  expect_mapping_complete(*v1::KvSpliceJobSpec::descriptor(), jobs::kvsplice_spec_table());
}

TEST(TrainingSpecTest, ProtoSpecsArriveAsTheTypedSpecs) {
  v1::PrototypeJobSpec p;
  p.set_train_path("train.jsonl");
  p.set_test_path("test.jsonl");
  p.set_holdout_fraction(0.2);
  p.set_label_min(-1.5);
  (*p.mutable_config())["K"] = "8";
  (*p.mutable_config())["H"] = "16";
  p.set_activate(true);
  absl::StatusOr<jobs::PrototypeJobSpec> j = from_proto(p);
  ASSERT_TRUE(j.ok()) << j.status();
  jobs::PrototypeJobSpec want;
  want.train_path = "train.jsonl";
  want.test_path = "test.jsonl";
  want.holdout_fraction = 0.2;
  want.label_min = -1.5;
  want.config = {{"H", "16"}, {"K", "8"}};
  want.activate = true;
  EXPECT_TRUE(*j == want);
  // Unset (or proto3's empty / false): the spec's own unset, as the journal leaves it out.
  v1::PrototypeJobSpec rows;
  rows.mutable_inline_rows()->add_rows()->set_text("a");
  j = from_proto(rows);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_FALSE(j->train_path.has_value());
  EXPECT_FALSE(j->test_path.has_value());
  EXPECT_FALSE(j->label_max.has_value());
  ASSERT_TRUE(j->inline_rows.has_value());
  EXPECT_EQ(j->inline_rows->size(), 1u);
  EXPECT_FALSE(j->activate);

  v1::KvSpliceJobSpec k;
  k.set_calib_path("calib.jsonl");
  k.set_calib_windows(32);
  k.set_fisher_windows(0);  // set, though zero: proto3 optional keeps it
  absl::StatusOr<jobs::KvSpliceJobSpec> ks = from_proto(k);
  ASSERT_TRUE(ks.ok()) << ks.status();
  EXPECT_EQ(ks->calib_path, "calib.jsonl");
  EXPECT_EQ(ks->calib_windows, 32);
  EXPECT_EQ(ks->fisher_windows, 0);
  EXPECT_FALSE(ks->eval_windows.has_value());
  v1::KvRepairJobSpec r;
  r.set_eval_windows(4);
  absl::StatusOr<jobs::KvRepairJobSpec> rs = from_proto(r);
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_EQ(rs->eval_windows, 4);
  EXPECT_FALSE(rs->calib_path.has_value());
}

// A value the journal's JSON could not hold is refused at the edge, naming the proto path.
TEST(TrainingSpecTest, NonFiniteNumbersAreRefusedNamingTheField) {
  v1::PrototypeJobSpec p;
  p.set_train_path("t.jsonl");
  p.set_label_min(std::nan(""));
  const absl::Status s = from_proto(p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "prototype.label_min: expected a finite number, got nan");
}

}  // namespace
}  // namespace frost::server
